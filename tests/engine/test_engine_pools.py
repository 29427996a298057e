"""Which slices the engine allocates from: pools judged per node, as kube-scheduler does."""

from __future__ import annotations

import copy
from typing import Any

from controller.kit import (
    DRIVER,
    claim,
    cluster,
    commit,
    devices_of,
    node,
    pod,
    share_ids,
    slices_of,
)

from dra_driver.engine import Placed, Policy, Unplaceable, place_pod

Object = dict[str, Any]
CARDS = slices_of([node("template", 2)])[0]["spec"]["devices"]
"""Two real card entries as the plugin publishes them (gpu-0, gpu-1)."""


def pool_slice(
    name: str, node_name: str, pool: str, *, generation: int, count: int, devices: list[str]
) -> Object:
    """Return one of our node-local slices of ``pool`` listing the named cards."""
    by_name = {d["name"]: d for d in CARDS}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": [copy.deepcopy(by_name[d]) for d in devices],
        },
    }


def decide(slices: list[Object], *nodes: str) -> Placed | Unplaceable:
    """Place one whole-card claim on a cluster of ``nodes`` publishing ``slices``."""
    snapshot = cluster(*(node(n, 0) for n in nodes), slices=slices)
    return place_pod(snapshot, pod(), [claim("a")], Policy(), share_id=share_ids())


def test_a_pool_missing_one_of_its_slices_is_not_used():
    """Fewer slices than resourceSliceCount: the pool gives no card and the reason says so."""
    first = pool_slice("n-0", "n", "n", generation=3, count=2, devices=["gpu-0"])
    decision = decide([first], "n")
    assert isinstance(decision, Unplaceable)
    assert "pool n is being updated" in decision.reason
    second = pool_slice("n-1", "n", "n", generation=3, count=2, devices=["gpu-1"])
    assert isinstance(decide([first, second], "n"), Placed)


def test_only_the_newest_generation_counts_toward_completeness():
    """An older slice does not complete a newer generation of the pool."""
    old = pool_slice("n-old", "n", "n", generation=1, count=2, devices=["gpu-1"])
    new = pool_slice("n-new", "n", "n", generation=2, count=2, devices=["gpu-0"])
    assert isinstance(decide([old, new], "n"), Unplaceable)


def test_slices_of_the_pool_on_another_node_complete_it():
    """Completeness counts the pool's slices of that generation wherever they are published."""
    here = pool_slice("p-0", "n", "p", generation=1, count=2, devices=["gpu-0"])
    there = pool_slice("p-1", "m", "p", generation=1, count=2, devices=["gpu-1"])
    decision = decide([here, there], "n", "m")
    assert isinstance(decision, Placed)


def test_a_newer_generation_on_another_node_makes_this_one_obsolete():
    """An incomplete generation with a newer one elsewhere is ignored, not reported."""
    here = pool_slice("p-0", "n", "p", generation=1, count=2, devices=["gpu-0"])
    newer = pool_slice("p-1", "m", "p", generation=2, count=1, devices=["gpu-1"])
    decision = decide([here, newer], "n", "m")
    assert isinstance(decision, Placed)
    assert decision.node == "m"
    snapshot = cluster(node("n", 0), slices=[here, newer])
    assert "n" not in snapshot.devices
    assert snapshot.unusable_pools == {}


def test_a_pool_naming_a_device_twice_is_not_used():
    """A device name listed twice makes the whole pool invalid; the reason names it."""
    one = pool_slice("n-0", "n", "n", generation=1, count=2, devices=["gpu-0", "gpu-1"])
    two = pool_slice("n-1", "n", "n", generation=1, count=2, devices=["gpu-1"])
    decision = decide([one, two], "n")
    assert isinstance(decision, Unplaceable)
    assert "pool n lists device gpu-1 twice" in decision.reason


def test_a_device_is_one_device_on_every_node_that_lists_it():
    """The same (pool, device) on two nodes is one device: allocated on one, taken on both."""
    slices = [
        pool_slice("a", "node-a", "shared", generation=1, count=1, devices=["gpu-0"]),
        pool_slice("b", "node-b", "shared", generation=1, count=1, devices=["gpu-0"]),
    ]
    snapshot = cluster(node("node-a", 0), node("node-b", 0), slices=slices)
    first = [claim("first")]
    decision = place_pod(snapshot, pod(), first, Policy(), share_id=share_ids())
    assert isinstance(decision, Placed)
    assert devices_of(decision) in (["node-a/gpu-0"], ["node-b/gpu-0"])
    commit(snapshot, first, decision)
    again = place_pod(snapshot, pod(), [claim("second")], Policy(), share_id=share_ids())
    assert isinstance(again, Unplaceable)


def test_slices_of_a_node_that_is_gone_are_not_allocated_from():
    """A deleted node's slices may outlive it for a moment: its cards are skipped, no crash."""
    slices = [pool_slice("gone-0", "gone", "gone", generation=1, count=1, devices=["gpu-0"])]
    decision = decide(slices, "n")
    assert isinstance(decision, Unplaceable)
    assert decision.reason.startswith("0/1 nodes are available: 1 node: node has no devices")
