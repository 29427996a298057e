"""The pod's own needs on a node (CPU, memory, pod count, ports) steer the engine's choice."""

from __future__ import annotations

from controller.kit import claim, cluster, node, pod, share_ids

from dra_driver.engine import Placed, Policy, Unplaceable, place_pod


def test_a_node_without_room_for_the_pod_is_passed_over():
    """A node whose pods leave no CPU for this one is skipped for the next that fits."""
    snapshot = cluster(node("node-a", 1), node("node-b", 1))
    full = {"node-a": "Insufficient cpu"}
    decision = place_pod(
        snapshot,
        pod(),
        [claim("a")],
        Policy(),
        share_id=share_ids(),
        node_fit=lambda n: full.get(n["metadata"]["name"]),
    )
    assert isinstance(decision, Placed)
    assert decision.node == "node-b"


def test_no_node_with_room_names_what_is_short():
    """With no node fitting the pod itself, the reason is kube-scheduler's, per node."""
    snapshot = cluster(node("node-a", 1), node("node-b", 1))
    decision = place_pod(
        snapshot,
        pod(),
        [claim("a")],
        Policy(),
        share_id=share_ids(),
        node_fit=lambda _: "Insufficient memory",
    )
    assert isinstance(decision, Unplaceable)
    assert decision.reason == "0/2 nodes are available: 2 nodes: Insufficient memory"
