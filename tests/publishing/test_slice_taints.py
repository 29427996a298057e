"""Unhealthy cards as tainted devices: the taint, the 64-device limit, what an update carries."""

from __future__ import annotations

import copy

import pytest
from publishing.test_slices import NAMES, NODE, UID, card, names_of

from dra_driver.nvml.inventory import Card, Health
from dra_driver.publishing.slices import desired_slices, unhealthy_taint
from dra_driver.publishing.slicesync import (
    carry_taint_times,
    keeps_taints,
    plan_sync,
    with_generation,
)

KEY = "gpushare.dra.dev/unhealthy"


def sick(i: int, message: str | None = "XID 79 (GPU has fallen off the bus)") -> Card:
    """Return card ``i`` marked unhealthy with ``message``."""
    return card(i, health=Health.UNHEALTHY, health_message=message)


@pytest.mark.parametrize(
    ("message", "value"),
    [
        ("XID 79 (GPU has fallen off the bus)", "xid-79"),
        ("xid 48 on a card NVML could not identify", "xid-48"),
        ("double-bit ECC error", "ecc"),
        ("NVML event wait failed: Unknown Error", "unhealthy"),
        (None, "unhealthy"),
    ],
)
def test_the_taint_value_says_why_in_label_value_form(message: str | None, value: str) -> None:
    """A fatal XID names its number, ECC says ecc, anything else says unhealthy."""
    taint = unhealthy_taint(
        card(0, health=Health.UNHEALTHY, health_message=message), NAMES, "NoSchedule"
    )
    assert taint == {"key": KEY, "value": value, "effect": "NoSchedule"}


def test_an_unhealthy_card_is_published_tainted_in_its_place() -> None:
    """With an effect, the card stays in bus order and carries exactly one taint."""
    (slice_,) = desired_slices(NAMES, NODE, UID, [card(0), sick(1), card(2)], unhealthy="NoExecute")
    devices = slice_["spec"]["devices"]
    assert names_of(slice_) == ["gpu-0", "gpu-1", "gpu-2"]
    assert [d.get("taints") for d in devices] == [
        None, [{"key": KEY, "value": "xid-79", "effect": "NoExecute"}], None,
    ]  # fmt: skip


def test_a_tainted_device_limits_its_slices_to_64_devices() -> None:
    """One tainted card among 100 splits them 64 + 36, as the API server requires."""
    cards = [sick(0), *(card(i) for i in range(1, 100))]
    slices = desired_slices(NAMES, NODE, UID, cards, unhealthy="NoSchedule")
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 36]
    healthy = desired_slices(
        NAMES, NODE, UID, [card(i) for i in range(100)], unhealthy="NoSchedule"
    )
    assert [len(s["spec"]["devices"]) for s in healthy] == [100]


def test_an_effect_outside_the_allowed_two_is_refused() -> None:
    """PreferNoSchedule is no device taint effect: the builder names the allowed ones."""
    with pytest.raises(ValueError, match="NoSchedule"):
        desired_slices(NAMES, NODE, UID, [sick(0)], unhealthy="PreferNoSchedule")


def test_an_update_carries_the_time_each_kept_taint_was_added() -> None:
    """timeAdded of an unchanged taint is copied from the stored slice; a new taint gets none."""
    (stored,) = desired_slices(NAMES, NODE, UID, [sick(0), card(1)], unhealthy="NoSchedule")
    stored = with_generation(stored, 1)
    stored["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-11-01T00:00:00Z"
    (want,) = desired_slices(NAMES, NODE, UID, [sick(0), sick(1, None)], unhealthy="NoSchedule")
    carried = carry_taint_times(stored, want)["spec"]["devices"]
    assert carried[0]["taints"][0]["timeAdded"] == "2026-11-01T00:00:00Z"
    assert "timeAdded" not in carried[1]["taints"][0]
    assert "timeAdded" not in want["spec"]["devices"][0]["taints"][0]  # want is not changed


def test_a_healed_card_is_a_change_even_though_the_rest_is_covered() -> None:
    """The stored slice has a taint the desired one lacks: the plan updates it in place."""
    (stored,) = desired_slices(NAMES, NODE, UID, [sick(0)], unhealthy="NoSchedule")
    stored = with_generation(stored, 1)
    stored["metadata"].update(name="s-1", resourceVersion="5")
    (healed,) = desired_slices(NAMES, NODE, UID, [card(0)], unhealthy="NoSchedule")
    plan = plan_sync([stored], [healed], NODE, 1)
    assert [c["metadata"]["name"] for c, _ in plan.update] == ["s-1"]
    assert plan_sync([stored], [stored], NODE, 1).empty


def test_a_server_that_drops_taints_is_recognised() -> None:
    """keeps_taints is false once a sent taint is missing from what was stored."""
    (sent,) = desired_slices(NAMES, NODE, UID, [sick(0), card(1)], unhealthy="NoSchedule")
    stored = copy.deepcopy(sent)
    stored["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-11-01T00:00:00Z"
    assert keeps_taints(sent, stored)
    del stored["spec"]["devices"][0]["taints"]
    assert not keeps_taints(sent, stored)
