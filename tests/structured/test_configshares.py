"""Counting config-sized shares on whole-only cards: which results become shares, and how big."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from dra_driver.api import DriverNames
from dra_driver.structured.configshares import SCHEDULER_FINALIZER, config_size, counted_claim
from dra_driver.structured.consumable import Capacity

NAMES = DriverNames.for_driver("gpushare.dra.dev")
CARD = {
    "cores": Capacity(Fraction(100), None, "100"),
    "memory": Capacity(Fraction(16 * 2**30), None, "16Gi"),
}
Object = dict[str, Any]


def known(device_id: tuple[str, str, str]) -> dict[str, Capacity] | None:
    """Know one card, gpu-0 of pool n."""
    return CARD if device_id == (NAMES.driver, "n", "gpu-0") else None


def allocated(parameters: Object, **result: object) -> Object:
    """Return a claim allocated on n/gpu-0 whose allocation carries ``parameters``."""
    entry = {
        "source": "FromClaim",
        "opaque": {
            "driver": NAMES.driver,
            "parameters": {"apiVersion": NAMES.config_api_version, "kind": "GpuShareConfig"}
            | parameters,
        },
    }
    results = [{"request": "gpu", "driver": NAMES.driver, "pool": "n", "device": "gpu-0"}]
    results[0].update(result)
    return {
        "metadata": {"uid": "u1", "finalizers": []},
        "status": {"allocation": {"devices": {"results": results, "config": [entry]}}},
    }


def test_a_sized_result_gets_a_share_id_and_its_config_amounts() -> None:
    """cores 30 and memory 5Gi become consumedCapacity; the input claim is left as it was."""
    claim = allocated({"cores": "30", "memory": "5Gi"})
    counted = counted_claim(claim, NAMES, known)
    (result,) = counted["status"]["allocation"]["devices"]["results"]
    assert result["shareID"] == "config/u1/0"
    assert result["consumedCapacity"] == {"cores": "30", "memory": "5Gi"}
    assert "shareID" not in claim["status"]["allocation"]["devices"]["results"][0]


def test_an_unset_size_takes_all_of_that_capacity() -> None:
    """cores alone: the share also takes all of the card's memory, as a capacity request would."""
    counted = counted_claim(allocated({"cores": "30"}), NAMES, known)
    (result,) = counted["status"]["allocation"]["devices"]["results"]
    assert result["consumedCapacity"] == {"cores": "30", "memory": "16Gi"}


@pytest.mark.parametrize(
    ("parameters", "result"),
    [
        ({}, {}),
        ({"cores": "30", "isolation": "exclusive"}, {}),
        ({"memory": "17Gi"}, {}),
        ({"cores": "30", "isolation": "sometimes"}, {}),
        ({"cores": "30"}, {"shareID": "11111111-2222-4333-8444-000000000001"}),
        ({"cores": "30"}, {"device": "gpu-9"}),
        ({"cores": "30"}, {"driver": "other.example.com"}),
        ({"cores": "30"}, {"adminAccess": True}),
    ],
    ids=[
        "unsized",
        "exclusive",
        "bigger-than-the-card",
        "bad-config",
        "real-share",
        "unknown-card",
        "other-driver",
        "admin-access",
    ],
)
def test_results_that_are_not_config_shares_are_left_alone(
    parameters: Object, result: Object
) -> None:
    """Whole-card meanings, real shares and results not on our known cards are not rewritten."""
    claim = allocated(parameters, **result)
    assert counted_claim(claim, NAMES, known) is claim


def test_a_claim_kube_scheduler_allocated_is_never_rewritten() -> None:
    """kube-scheduler's finalizer marks its whole-card allocation, even with sizes in config."""
    claim = allocated({"cores": "30", "memory": "5Gi"})
    claim["metadata"]["finalizers"] = [SCHEDULER_FINALIZER]
    assert counted_claim(claim, NAMES, known) is claim


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("cores", "30", "30"),
        ("cores", "100", "100"),
        ("cores", "101", None),
        ("cores", "12.5", None),
        ("memory", "5Gi", "5Gi"),
        ("memory", "1536Mi", "1536Mi"),
        ("memory", "1073741824", "1Gi"),
        ("memory", "1536Ki", None),
        ("memory", "5G", None),
        ("memory", "not-a-quantity", None),
        ("gpus", "1", None),
    ],
)
def test_config_size_converts_only_exact_amounts(name: str, text: str, value: str | None) -> None:
    """A capacity amount converts when the config field holds it exactly, else None."""
    assert config_size(name, text) == value
