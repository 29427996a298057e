"""The pieces the webhook shares with the controller and the kubelet plugin."""

from __future__ import annotations

import pytest
from webhook.kit import DRIVER, NVIDIA, claim_spec, classes, exactly, request

from dra_driver.api import Backend, Isolation
from dra_driver.cdi.policy import unsupported_policy
from dra_driver.structured.classes import device_entries, spec_uses_driver


def test_device_entries_name_exactly_and_first_available_like_results() -> None:
    """Each entry comes with its path under spec.devices and the result name it would get."""
    spec = claim_spec(
        request("a"),
        {"name": "b", "firstAvailable": [{"name": "x", **exactly()}, {"name": "y", **exactly()}]},
    )
    assert [(path, result) for path, result, _ in device_entries(spec)] == [
        ("requests[0].exactly", "a"),
        ("requests[1].firstAvailable[0]", "b/x"),
        ("requests[1].firstAvailable[1]", "b/y"),
    ]


@pytest.mark.parametrize(
    ("spec", "ours"),
    [
        (claim_spec(request()), True),
        (claim_spec(request(device_class=NVIDIA)), False),
        (claim_spec(request(device_class="unknown.example.com")), False),
        (claim_spec({"name": "b", "firstAvailable": [exactly(NVIDIA), exactly()]}), True),
        ({}, False),
    ],
)
def test_spec_uses_driver_only_for_our_known_classes(spec: dict[str, object], ours: bool) -> None:
    """A spec is ours when any entry names a known class of ours; unknown classes are not."""
    assert spec_uses_driver(spec, classes(), DRIVER) is ours


@pytest.mark.parametrize(
    ("backend", "isolation", "cores", "cards", "expected"),
    [
        (Backend.MPS, Isolation.FIXED_SHARE, [("x", 30)], 1, None),
        (Backend.NONE, Isolation.FIXED_SHARE, [("x", 0)], 99, None),
        (Backend.HAMI_CORE, Isolation.BEST_EFFORT, [("x", 0)], 16, None),
        (
            Backend.MPS,
            Isolation.FIXED_SHARE,
            [("card 1 (GPU-1)", 0)],
            1,
            'backend "mps": isolation "fixed-share": card 1 (GPU-1) has 0 cores, and a 0% '
            "active thread percentage leaves the client no SMs; request at least 1 core, or "
            'use isolation "best-effort"',
        ),
    ],
)
def test_unsupported_policy_is_one_answer_for_plugin_and_webhook(
    backend: Backend,
    isolation: Isolation,
    cores: list[tuple[str, int]],
    cards: int,
    expected: str | None,
) -> None:
    """The backend check names the share it is given and refuses only what cannot be enforced."""
    assert unsupported_policy(backend, isolation, cores=cores, cards=cards) == expected
