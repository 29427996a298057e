"""GpuShareQuota: reading a quota, what an allocated claim takes of it, and when it is full."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
import yaml

from dra_driver.api import DriverNames, Priority
from dra_driver.quota import (
    Amounts,
    Quota,
    QuotaSpecError,
    breaches,
    claim_use,
    describe,
    parse_quota,
    total_use,
)

NAMES = DriverNames.for_driver("gpushare.dra.dev")
GI = 2**30
CARD_MEMORY = Fraction(16 * GI)
QUOTA = """
apiVersion: gpushare.dra.dev/v1alpha1
kind: GpuShareQuota
metadata: {name: gpu, namespace: team-a}
spec:
  hard: {cores: "150", memory: 40Gi, cards: 4}
"""


def quota(**spec: Any) -> Quota:
    obj = yaml.safe_load(QUOTA)
    obj["spec"] = spec or obj["spec"]
    return parse_quota(obj)


def result(request: str = "gpu", share: bool = True, **consumed: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "request": request,
        "driver": NAMES.driver,
        "pool": "n1",
        "device": "gpu-0",
    }
    if share:
        entry["shareID"] = "3f2a0c9e-0000-4000-8000-000000000001"
        entry["consumedCapacity"] = consumed
    return entry


def allocated(
    *results: dict[str, Any], priority: str | None = None, name: str = "c"
) -> dict[str, Any]:
    config = []
    if priority is not None:
        parameters = {
            "apiVersion": NAMES.config_api_version,
            "kind": "GpuShareConfig",
            "priority": priority,
        }
        config = [
            {"source": "FromClaim", "opaque": {"driver": NAMES.driver, "parameters": parameters}}
        ]
    return {
        "metadata": {"namespace": "team-a", "name": name, "uid": f"uid-{name}"},
        "status": {"allocation": {"devices": {"results": list(results), "config": config}}},
    }


def memory(pool: str, device: str) -> Fraction | None:
    return CARD_MEMORY if (pool, device) == ("n1", "gpu-0") else None


def test_a_quota_reads_its_limits_as_numbers_in_resource_order() -> None:
    """hard as written in YAML (quoted, unquoted, binary suffix) becomes exact amounts."""
    read = quota()
    assert (read.namespace, read.name, read.priority) == ("team-a", "gpu", None)
    assert read.hard == {"cores": 150, "memory": 40 * GI, "cards": 4}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"hard": {}}, "spec.hard must name at least one of cores, memory, cards"),
        ({"hard": {"gpus": "1"}}, "spec.hard.gpus is not a resource"),
        ({"hard": {"cores": "1.5"}}, "spec.hard.cores must be a whole number"),
        ({"hard": {"cores": "-1"}}, "spec.hard.cores must not be negative"),
        ({"hard": {"memory": "lots"}}, "spec.hard.memory"),
        ({"hard": {"memory": True}}, "spec.hard.memory must be a quantity"),
        (
            {"hard": {"cores": "10"}, "priority": "batch"},
            "spec.priority is 'batch'; allowed: online, offline",
        ),
    ],
)
def test_a_quota_that_cannot_be_enforced_is_refused_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    """Every malformed field is named, with the quota, never a crash."""
    with pytest.raises(QuotaSpecError, match="GpuShareQuota team-a/gpu: ") as caught:
        quota(**spec)
    assert field in str(caught.value)


def test_shares_take_their_consumed_capacity_and_a_whole_card_takes_it_all() -> None:
    """A share counts its cores and memory; a whole card is 100 cores, its memory and a card."""
    share = claim_use(allocated(result(cores="30", memory="4Gi")), NAMES, memory)
    whole = claim_use(allocated(result(share=False), name="w"), NAMES, memory)
    assert share is not None
    assert whole is not None
    assert share.counted_by(quota()) == Amounts(cores=Fraction(30), memory=Fraction(4 * GI))
    assert whole.counted_by(quota()) == Amounts(Fraction(100), CARD_MEMORY, Fraction(1))


def test_admin_access_other_drivers_and_unknown_cards_take_nothing() -> None:
    """Only this driver's known cards, used (not watched), count against a quota."""
    admin = {**result(share=False), "adminAccess": True}
    foreign = {**result(share=False), "driver": "gpu.nvidia.com"}
    elsewhere = {**result(share=False), "device": "gpu-9"}
    assert claim_use(allocated(admin, foreign, elsewhere), NAMES, memory) is None


def test_a_priority_quota_counts_only_shares_of_that_priority() -> None:
    """An offline quota counts offline shares; online ones (and the default) pass it by."""
    offline = claim_use(
        allocated(result(cores="40", memory="1Gi"), priority="offline", name="o"), NAMES, memory
    )
    online = claim_use(
        allocated(result(cores="50", memory="1Gi"), priority="online", name="n"), NAMES, memory
    )
    assert offline is not None
    assert online is not None
    limited = quota(hard={"cores": "100"}, priority="offline")
    assert limited.priority is Priority.OFFLINE
    assert total_use(limited, [offline, online]) == (
        Amounts(cores=Fraction(40), memory=Fraction(GI)),
        1,
    )
    assert total_use(quota(hard={"cores": "100"}), [offline, online])[0].cores == 90


def test_a_quota_is_breached_only_in_what_is_asked_past_hard() -> None:
    """used + asked over hard breaches; exactly hard does not; a resource not asked never does."""
    limit = quota(hard={"cores": "100", "memory": "10Gi"})
    used = Amounts(cores=Fraction(70), memory=Fraction(11 * GI))  # memory already over
    assert breaches(limit, used, Amounts(cores=Fraction(30))) == []
    found = breaches(limit, used, Amounts(cores=Fraction(40)))
    assert describe(found) == "GpuShareQuota team-a/gpu: cores used 70, asked 40, hard 100"
    assert [b.resource for b in breaches(limit, used, Amounts(memory=Fraction(1)))] == ["memory"]
