"""The harness first-fit allocator follows kube-scheduler's consumable-capacity rules."""

from __future__ import annotations

from typing import Any

import pytest
from gpushare_simulator.harness.actors.firstfit import (
    AllocatedState,
    Unallocatable,
    allocate_on_node,
)
from harness.manifests import DRIVER
from harness.manifests import device as card

GI = 1024**3


def pool(
    node: str, *devices: dict[str, Any], generation: int = 1, name: str | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name or f"{node}-slice"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


CLASSES = {
    "gpushare.dra.dev": {
        "metadata": {"name": "gpushare.dra.dev"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpushare.dra.dev'"}}],
            "config": [{"opaque": {"driver": DRIVER, "parameters": {"isolation": "burst-share"}}}],
        },
    }
}


def claim(
    *requests: dict[str, Any], config: list[dict[str, Any]] | None = None, **devices: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"requests": list(requests), **devices}
    if config:
        spec["config"] = config
    return {"metadata": {"name": "c", "namespace": "default"}, "spec": {"devices": spec}}


def share(
    name: str = "gpu", cores: str | None = None, memory: str | None = None, **extra: Any
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpushare.dra.dev", **extra}
    requests = {k: v for k, v in (("cores", cores), ("memory", memory)) if v is not None}
    if requests:
        exactly["capacity"] = {"requests": requests}
    return {"name": name, "exactly": exactly}


def allocate(
    node: str,
    claims: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    state: AllocatedState | None = None,
) -> list[dict[str, Any]]:
    return allocate_on_node(
        node, claims, slices, CLASSES, state or AllocatedState(), allocation_timestamp=None
    )


def allocated(allocation: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"allocation": allocation}}


def test_two_shares_fit_one_card_and_a_third_does_not() -> None:
    """40 + 30 cores share a card; another 40 would exceed 100 cores and is refused."""
    slices = [pool("n1", card("gpu-0"))]
    first = allocate("n1", [claim(share(cores="40", memory="5Gi"))], slices)[0]
    state = AllocatedState.from_claims([allocated(first)])
    second = allocate("n1", [claim(share(cores="30", memory="5Gi"))], slices, state)[0]
    state = AllocatedState.from_claims([allocated(first), allocated(second)])
    result = first["devices"]["results"][0]
    assert result["consumedCapacity"] == {"cores": "40", "memory": "5Gi"}
    assert result["shareID"] != second["devices"]["results"][0]["shareID"]
    with pytest.raises(Unallocatable, match="request gpu: no device on node n1 fits"):
        allocate("n1", [claim(share(cores="40", memory="1Gi"))], slices, state)


def test_no_request_takes_the_defaults_which_are_the_whole_card() -> None:
    """A claim without capacity requests consumes the policy defaults: all cores, all memory."""
    slices = [pool("n1", card("gpu-0"))]
    whole = allocate("n1", [claim(share())], slices)[0]
    assert whole["devices"]["results"][0]["consumedCapacity"] == {"cores": "100", "memory": "16Gi"}
    with pytest.raises(Unallocatable):
        allocate(
            "n1",
            [claim(share(cores="1", memory="1Mi"))],
            slices,
            AllocatedState.from_claims([allocated(whole)]),
        )


def test_requests_are_rounded_up_to_the_step_and_checked_against_max() -> None:
    """1.5Mi rounds up to 2Mi (step 1Mi); 150 cores exceeds max 100 and fits no card."""
    slices = [pool("n1", card("gpu-0"))]
    result = allocate("n1", [claim(share(cores="10", memory="1536Ki"))], slices)[0]["devices"][
        "results"
    ][0]
    assert result["consumedCapacity"]["memory"] == "2Mi"
    with pytest.raises(Unallocatable):
        allocate("n1", [claim(share(cores="150"))], slices)


def test_capacity_the_device_lacks_makes_it_unsuitable() -> None:
    """Requesting a capacity a device does not publish skips that device."""
    request = share(capacity={"requests": {"bandwidth": "1"}})
    with pytest.raises(Unallocatable):
        allocate("n1", [claim(request)], [pool("n1", card("gpu-0"))])


def test_exclusive_devices_are_used_once_and_get_no_share_id() -> None:
    """A device without allowMultipleAllocations is given whole, without shareID, only once."""
    slices = [pool("n1", card("gpu-0", shareable=False))]
    first = allocate("n1", [claim(share())], slices)[0]
    result = first["devices"]["results"][0]
    assert "shareID" not in result
    with pytest.raises(Unallocatable):
        allocate("n1", [claim(share())], slices, AllocatedState.from_claims([allocated(first)]))


def test_count_takes_distinct_devices_and_failure_leaks_nothing() -> None:
    """count: 2 takes two cards; when only one is free the attempt fails without consuming it."""
    slices = [pool("n1", card("gpu-0"), card("gpu-1"))]
    both = allocate("n1", [claim(share(count=2))], slices)[0]
    assert [r["device"] for r in both["devices"]["results"]] == ["gpu-0", "gpu-1"]
    state = AllocatedState.from_claims([allocated(allocate("n1", [claim(share())], slices)[0])])
    with pytest.raises(Unallocatable):
        allocate("n1", [claim(share(count=2))], slices, state)
    assert set(state.consumed) == {(DRIVER, "n1", "gpu-0")}


def test_all_mode_takes_every_matching_device() -> None:
    """allocationMode All allocates every device of the class on the node."""
    slices = [pool("n1", card("gpu-0"), card("gpu-1"), card("gpu-2"))]
    result = allocate("n1", [claim(share(allocationMode="All"))], slices)[0]
    assert len(result["devices"]["results"]) == 3


def test_first_available_falls_back_in_order() -> None:
    """firstAvailable tries alternatives in order and names the result request/sub."""
    slices = [pool("n1", card("gpu-0"))]
    request = {
        "name": "gpu",
        "firstAvailable": [
            {
                "name": "big",
                "deviceClassName": "gpushare.dra.dev",
                "capacity": {"requests": {"memory": "64Gi"}},
            },
            {
                "name": "small",
                "deviceClassName": "gpushare.dra.dev",
                "capacity": {"requests": {"memory": "4Gi"}},
            },
        ],
    }
    result = allocate("n1", [claim(request)], slices)[0]["devices"]["results"][0]
    assert result["request"] == "gpu/small"


def test_configs_come_from_class_then_claim() -> None:
    """Allocation config lists the class's config (FromClass) before the claim's (FromClaim)."""
    claim_config = {
        "requests": ["gpu"],
        "opaque": {"driver": DRIVER, "parameters": {"isolation": "fixed-share"}},
    }
    allocation = allocate(
        "n1", [claim(share(), config=[claim_config])], [pool("n1", card("gpu-0"))]
    )[0]
    assert [c["source"] for c in allocation["devices"]["config"]] == ["FromClass", "FromClaim"]
    assert allocation["devices"]["config"][0]["requests"] == ["gpu"]
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]


def test_only_the_newest_pool_generation_counts() -> None:
    """Devices of an older generation of the pool are ignored."""
    slices = [
        pool("n1", card("old"), generation=1, name="a"),
        pool("n1", card("new"), generation=2, name="b"),
    ]
    assert allocate("n1", [claim(share())], slices)[0]["devices"]["results"][0]["device"] == "new"


def test_other_nodes_devices_are_not_used() -> None:
    """Only devices published for the node being tried are candidates."""
    with pytest.raises(Unallocatable):
        allocate("n2", [claim(share())], [pool("n1", card("gpu-0"))])


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (
            {"constraints": [{"requests": ["gpu"], "matchAttribute": "gpushare.dra.dev/uuid"}]},
            "does not evaluate claim constraints",
        ),
        ({}, "evaluates only device.driver"),
    ],
    ids=["constraints", "cel"],
)
def test_unsupported_features_are_refused_not_guessed(
    devices: dict[str, Any], message: str
) -> None:
    """Constraints and general CEL are refused with a reason rather than mis-evaluated."""
    selectors = [] if devices else [{"cel": {"expression": "device.attributes['x'].y > 1"}}]
    with pytest.raises(Unallocatable, match=message):
        allocate("n1", [claim(share(selectors=selectors), **devices)], [pool("n1", card("gpu-0"))])


def test_missing_device_class_is_named() -> None:
    """A request for a class that does not exist fails naming the class, like the scheduler."""
    request = {"name": "gpu", "exactly": {"deviceClassName": "nope"}}
    with pytest.raises(Unallocatable, match="request gpu: device class nope does not exist"):
        allocate("n1", [claim(request)], [pool("n1", card("gpu-0"))])
