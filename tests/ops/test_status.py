"""``gpushare-dra status``: each card's use and holders, and the waiting pods with reasons."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from ops.builders import NAMES, claim, pod, seed_cards, share, whole

from dra_driver.cli.main import kubectl_plugin, main
from dra_driver.nvml.inventory import Health, builtin_inventory
from dra_driver.plan.inventory import node_object
from dra_driver.publishing.slices import desired_slices
from dra_driver.publishing.slicesync import with_generation

SECOND_SHARE = "7d3f1c2a-0000-4000-8000-000000000002"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """Serve qgpu-runbook's cards: two shares on node-2/gpu-0, gpu-1 whole, one waiting pod."""
    with FakeApiServer() as running:
        seed_cards(running)
        allocated = {
            "a": claim("a", results=[share("gpu-0", "30", "4Gi")], pods=("pa",)),
            "b": claim("b", results=[share("gpu-0", "40", "2Gi", SECOND_SHARE)], pods=("pb",)),
            "w": claim("w", results=[whole("gpu-1")], pods=("pw",)),
        }
        for name, wanted in allocated.items():
            running.create(claim(name))
            current = running.get("resourceclaims", "default", name)
            assert current is not None
            running.update_status({**current, "status": wanted["status"]})
        running.create(claim("big"))
        waiting = running.create(pod("waits", gates=(NAMES.scheduling_gate,), claim_name="big"))
        running.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "waits.1", "namespace": "default"},
                "involvedObject": {
                    "kind": "Pod",
                    "namespace": "default",
                    "name": "waits",
                    "uid": waiting["metadata"]["uid"],
                },
                "type": "Warning",
                "reason": "FailedAllocation",
                "message": "no card has 20Gi free",
                "lastTimestamp": "2026-11-26T00:00:00Z",
            }
        )
        running.create(pod("elsewhere"))  # no claim, no gate: not ours to report
        yield running
        assert running.internal_errors == []


def test_json_view_counts_shares_whole_cards_and_free_capacity(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shares add their consumed capacity; a whole-card result takes all; free is the rest."""
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"], environ={}) == 0
    view = json.loads(capsys.readouterr().out)
    cards = {(c["node"], c["device"]): c for c in view["cards"]}
    assert sorted(cards) == [("node-1", "gpu-0"), ("node-2", "gpu-0"), ("node-2", "gpu-1")]
    shared = cards["node-2", "gpu-0"]
    assert shared["shareable"] is True
    assert shared["cores"] == {"capacity": "100", "used": "70", "free": "30"}
    assert (shared["memory"]["used"], shared["product"]) == ("6Gi", "Tesla T4")
    assert [(s["claim"], s["pods"], s["wholeCard"]) for s in shared["shares"]] == [
        ("default/a", ["pa"], False),
        ("default/b", ["pb"], False),
    ]
    taken = cards["node-2", "gpu-1"]
    assert (taken["cores"]["free"], taken["memory"]["free"]) == ("0", "0")
    assert cards["node-1", "gpu-0"]["shares"] == []
    assert view["waiting"] == [
        {
            "pod": "default/waits",
            "gated": True,
            "reason": "FailedAllocation: no card has 20Gi free",
            "waitsOnQuota": False,
        }
    ]


def test_table_names_holders_and_reasons_and_only_reads(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table shows each card's holders and each waiting pod's reason; nothing is written."""
    server.reset_requests()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["status", "--kubeconfig", str(kubeconfig)], environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    header = "NODE CARD PRODUCT SHARES CORES USED/FREE MEMORY USED/FREE HELD BY"
    assert lines[0].split() == header.split()
    row = next(line for line in lines if line.startswith("node-2") and " gpu-1 " in line)
    assert "pw (default/w, whole card)" in row
    assert lines[-1].split(None, 2) == [
        "default/waits",
        "yes",
        "FailedAllocation: no card has 20Gi free",
    ]
    assert {verb for verb, _ in server.requests} == {"list"}


def test_kubectl_plugin_runs_status_by_default(
    server: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kubectl gpushare` alone is `status`, reading KUBECONFIG as kubectl does."""
    monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    assert kubectl_plugin([]) == 0
    assert capsys.readouterr().out.startswith("NODE")
    assert kubectl_plugin(["-o", "json"]) == 0
    assert "cards" in json.loads(capsys.readouterr().out)


@contextmanager
def plain_server() -> Iterator[FakeApiServer]:
    """Serve one node publishing its one card whole-only, as on a 1.35 API server."""
    with FakeApiServer(kube_version="1.35") as server:
        for node in builtin_inventory("one-node-one-card").nodes:
            server.create(node_object(node))
            for slice_ in desired_slices(NAMES, node.name, "uid", node.cards, shared=False):
                server.create(with_generation(slice_, 1))
        yield server


def test_plain_devices_are_reported_as_whole_cards_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node publishing plain devices (no consumable capacity) is named, with the fix."""
    with plain_server() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        assert main(["status", "--kubeconfig", str(kubeconfig)], environ={}) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "whole cards only on node-1: the API server drops consumable capacity" in "\n".join(
            lines
        )
        assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"], environ={}) == 0
        (card,) = json.loads(capsys.readouterr().out)["cards"]
        assert card["shareable"] is False


def test_config_sized_shares_on_a_plain_card_are_counted_as_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two claims sized by config on one plain card: two shares of their sizes, not whole."""
    with plain_server() as server:
        for name, cores, memory in (("a", "30", "4Gi"), ("b", "40", "2Gi")):
            server.create(claim(name))
            current = server.get("resourceclaims", "default", name)
            assert current is not None
            allocated = claim(name, results=[whole("gpu-0")], pods=(f"p{name}",))["status"]
            allocated["allocation"]["devices"]["results"][0]["pool"] = "node-1"
            parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind}
            parameters |= {"cores": cores, "memory": memory}
            allocated["allocation"]["devices"]["config"] = [
                {
                    "source": "FromClaim",
                    "opaque": {"driver": NAMES.driver, "parameters": parameters},
                }
            ]
            server.update_status({**current, "status": allocated})
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"], environ={}) == 0
        (card,) = json.loads(capsys.readouterr().out)["cards"]
        assert [s["wholeCard"] for s in card["shares"]] == [False, False]
        assert (card["cores"]["used"], card["memory"]["used"]) == ("70", "6Gi")


@pytest.mark.parametrize("command", ["status", "cleanup"])
def test_an_unusable_kubeconfig_is_a_usage_error_naming_the_command(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kubeconfig that cannot be loaded exits 2 with the command's name and the cause."""
    assert main([command, "--kubeconfig", str(tmp_path / "missing")], environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpushare-dra {command}: error: cannot load Kubernetes credentials")


def test_a_pod_held_by_another_gate_shows_that_gate_as_its_reason(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod gated by a queue as well as by us waits for that gate, and status says so."""
    server.create(claim("queued"))
    gates = ("kueue.x-k8s.io/admission", NAMES.scheduling_gate)
    server.create(pod("queued", gates=gates, claim_name="queued"))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"], environ={}) == 0
    waiting = {w["pod"]: w for w in json.loads(capsys.readouterr().out)["waiting"]}
    assert waiting["default/queued"] == {
        "pod": "default/queued",
        "gated": True,
        "reason": "waiting for the pod's other scheduling gates: kueue.x-k8s.io/admission",
        "waitsOnQuota": False,
    }


def test_a_tainted_card_is_listed_with_its_taint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unhealthy card's taint is named under the table and in the JSON view."""
    (node,) = builtin_inventory("one-node-one-card").nodes
    cards = [dataclasses.replace(node.cards[0], health=Health.UNHEALTHY, health_message="XID 79")]
    with FakeApiServer() as server:
        server.create(node_object(node))
        for slice_ in desired_slices(NAMES, node.name, "uid", cards, unhealthy="NoExecute"):
            server.create(with_generation(slice_, 1))
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        assert main(["status", "--kubeconfig", str(kubeconfig)], environ={}) == 0
        text = capsys.readouterr().out
        assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"], environ={}) == 0
        (card,) = json.loads(capsys.readouterr().out)["cards"]
    assert "  node-1/gpu-0 gpushare.dra.dev/unhealthy=xid-79:NoExecute" in text.splitlines()
    assert card["taints"] == ["gpushare.dra.dev/unhealthy=xid-79:NoExecute"]
