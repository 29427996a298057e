"""An unhealthy card is tainted in its slice where the API server keeps taints, else left out."""

from __future__ import annotations

from typing import Any

from gpushare_simulator.harness.apiserver import FakeApiServer
from kubeletplugin.test_publisher import card, fake_server, publishing, slices, wait_for
from structlog.testing import capture_logs

from dra_driver.nvml.inventory import Health

KEY = "gpushare.dra.dev/unhealthy"
XID_79 = {"health": Health.UNHEALTHY, "health_message": "XID 79 (GPU has fallen off the bus)"}


def _devices(server: FakeApiServer) -> dict[str, dict[str, Any]]:
    """Return the node's published devices by name."""
    return {d["name"]: d for s in slices(server) for d in s["spec"].get("devices") or []}


def test_an_unhealthy_card_carries_a_taint_naming_why_until_it_is_healthy() -> None:
    """XID 79 gives ``<driver>/unhealthy=xid-79:NoSchedule``, time-stamped; healthy clears it."""
    with fake_server() as server, publishing(server, [card(0), card(1, **XID_79)]) as publisher:
        assert publisher.wait_published(10)
        assert publisher.device_taints_supported is True
        (taint,) = _devices(server)["gpu-1"]["taints"]
        assert "taints" not in _devices(server)["gpu-0"]
        publisher.publish([card(0), card(1)])
        assert publisher.wait_published(10)
        assert "taints" not in _devices(server)["gpu-1"]
    assert {k: taint[k] for k in ("key", "value", "effect")} == {
        "key": KEY, "value": "xid-79", "effect": "NoSchedule",
    }  # fmt: skip
    assert taint["timeAdded"]


def test_the_time_a_taint_was_added_survives_other_changes_to_the_slice() -> None:
    """An update for another card carries the stored timeAdded: NoExecute timing never restarts."""
    with fake_server() as server:
        with publishing(server, [card(0, **XID_79), card(1)], unhealthy_effect="NoExecute") as pub:
            assert pub.wait_published(10)
            (first,) = _devices(server)["gpu-0"]["taints"]
            server.reset_requests()
            pub.publish([card(0, **XID_79), card(1, health=Health.UNHEALTHY)])
            assert pub.wait_published(10)
            devices = _devices(server)
        assert server.requests[("update", "resourceslices")] == 1
    assert devices["gpu-0"]["taints"] == [first]
    assert first["effect"] == "NoExecute"
    assert devices["gpu-1"]["taints"][0]["value"] == "unhealthy"


def test_without_device_taints_an_unhealthy_card_is_left_out_and_the_log_says_why() -> None:
    """On 1.35 (DRADeviceTaints off) the card is not published; a warning names the gate."""
    with (
        fake_server("1.35") as server,
        capture_logs() as logs,
        publishing(server, [card(0), card(1, **XID_79)]) as publisher,
    ):
        assert publisher.wait_published(10)
        assert publisher.device_taints_supported is False
        assert list(_devices(server)) == ["gpu-0"]
    (warning,) = [e for e in logs if e["event"] == "slices.device_taints_unsupported"]
    assert warning["log_level"] == "warning"
    assert "DRADeviceTaints feature gate" in warning["action"]


def test_turning_device_taints_on_later_publishes_the_card_tainted() -> None:
    """The re-check finds the gate on: the unhealthy card comes back, tainted, not bare."""
    with (
        fake_server("1.35") as server,
        publishing(server, [card(0), card(1, **XID_79)], recheck_seconds=0.2) as publisher,
    ):
        assert publisher.wait_published(10)
        assert list(_devices(server)) == ["gpu-0"]
        server.app.admission.gates.enabled["DRADeviceTaints"] = True
        device = wait_for(lambda: _devices(server).get("gpu-1"), "the tainted card")
        assert publisher.device_taints_supported is True
    assert [t["value"] for t in device["taints"]] == ["xid-79"]
