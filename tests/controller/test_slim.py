"""The controller's informers keep only what it reads, and what it reads survives slimming."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from controller.kit import NAMES, node
from controller.test_controller_e2e import bound, claims, gated_pod, harness, running
from gpushare_simulator.harness.lifelike import lifelike_claim, lifelike_node, lifelike_pod

from dra_driver.controller.slim import Slimmer, compact
from dra_driver.k8s import objects
from dra_driver.k8s.podaffinity import Placement, relevant
from dra_driver.k8s.podfit import NodeUsage, demand
from dra_driver.k8s.scheduling import node_unfit_reason

Object = dict[str, Any]
SLIM = Slimmer()
slim_pod, slim_node, slim_claim = SLIM.pod, SLIM.node, SLIM.claim


def thin_node(name: str, *, taint: bool = False) -> Object:
    """Return a Node with a zone label and, when asked, a GPU taint."""
    node: Object = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"zone": name[-1], "kubernetes.io/hostname": name}},
        "spec": {},
    }
    if taint:
        node["spec"]["taints"] = [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    return node


def thin_pod(name: str, **spec: Any) -> Object:
    """Return a Pod using claim ``c`` with extra spec fields."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}], **spec},
    }


SPECS: list[Object] = [
    {},
    {"nodeSelector": {"zone": "a"}},
    {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    {"resources": {"requests": {"cpu": "100", "memory": "1Ti"}}},
    {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "inference"}}, "topologyKey": "zone"}
                ]
            }
        }
    },
    {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "inference"}},
            }
        ]
    },
]


@pytest.mark.parametrize("extra", SPECS, ids=range(len(SPECS)))
def test_every_question_the_controller_asks_of_a_pod_gets_the_same_answer(extra: Object) -> None:
    """Demand, claims, node fit, affinity and spread agree on a lifelike pod and its slim copy."""
    nodes = [lifelike_node(thin_node(f"node-{z}", taint=z == "b")) for z in "ab"]
    running = [lifelike_pod(thin_pod(f"run-{i}"), f"node-{'ab'[i % 2]}") for i in range(3)]
    for placed in running:  # bound pods carry the same constraints; slimming drops some
        placed["spec"].update(copy.deepcopy(extra))
    pod = lifelike_pod(thin_pod("new", **copy.deepcopy(extra)), None)
    pod["spec"].update(copy.deepcopy(extra))  # lifelike_pod sets its own tolerations
    slim_nodes = [slim_node(n) for n in nodes]
    slim_running = [slim_pod(p) for p in running]
    assert demand(slim_pod(pod)) == demand(pod)
    assert objects.pod_claim_names(slim_pod(pod)) == objects.pod_claim_names(pod)
    assert objects.is_terminal(slim_pod(pod)) == objects.is_terminal(pod)
    for full_node, thin in zip(nodes, slim_nodes, strict=True):
        assert node_unfit_reason(slim_pod(pod), thin) == node_unfit_reason(pod, full_node)
    assert relevant(slim_pod(pod), slim_running) == relevant(pod, running)
    full = Placement(pod, running, nodes)
    slim = Placement(slim_pod(pod), slim_running, slim_nodes)
    for full_node, thin in zip(nodes, slim_nodes, strict=True):
        assert slim.unfit(thin) == full.unfit(full_node)
    usage, slim_usage = NodeUsage(), NodeUsage()
    for running_pod in running:
        usage.update(running_pod, deleted=False)
        slim_usage.update(slim_pod(running_pod), deleted=False)
    for full_node in nodes:
        full_reason = usage.unfit(demand(pod), full_node)
        assert slim_usage.unfit(demand(slim_pod(pod)), slim_node(full_node)) == full_reason


def test_slimming_keeps_a_small_part_of_lifelike_pods_and_nodes() -> None:
    """A running pod keeps under a quarter of its JSON, a node under a tenth."""
    pod = lifelike_pod(thin_pod("p"), "node-a")
    node = lifelike_node(thin_node("node-a"))
    assert len(json.dumps(slim_pod(pod))) < len(json.dumps(pod)) / 4
    assert len(json.dumps(slim_node(node))) < len(json.dumps(node)) / 10
    assert "env" not in json.dumps(slim_pod(pod))
    assert "images" not in slim_node(node)["status"]


def test_a_claim_loses_only_its_managed_fields() -> None:
    """A claim is written back whole, so everything but managedFields stays; none: unchanged."""
    claim = {"metadata": {"name": "c", "finalizers": ["x"]}, "spec": {}, "status": {"a": 1}}
    full = lifelike_claim(claim)
    assert slim_claim(full) == claim
    assert slim_claim(claim) == claim
    assert "managedFields" in full["metadata"]


def test_kept_keys_and_short_strings_are_one_object_across_objects() -> None:
    """Two claims read from JSON share their keys' and node names' string objects."""
    first, second = (
        json.loads(json.dumps({"metadata": {"name": "node-" + "a" * 3}, "spec": {}}))
        for _ in range(2)
    )
    assert next(iter(first)) is not next(iter(second))
    one, two = slim_claim(first), slim_claim(second)
    assert next(iter(one)) is next(iter(two))
    assert one["metadata"]["name"] is two["metadata"]["name"]
    long = "x" * 65
    assert compact({"k": long})["k"] is long


def test_the_controllers_writes_keep_a_claims_managed_fields(work_dir: Path) -> None:
    """Allocated and committed from a slimmed cache, the claim still has its managedFields."""
    with harness(work_dir, node("node-a", 1)) as cluster, running(cluster):
        made = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "named", "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": NAMES.default_device_class}}
                    ]
                }
            },
        }
        cluster.apply([lifelike_claim(made)])
        pod = gated_pod("p", "unused")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "named"}]
        cluster.apply([pod])
        cluster.wait_for(lambda: bound(cluster, "p"), "the pod to be bound")
        (stored,) = claims(cluster)
        assert NAMES.finalizer in stored["metadata"]["finalizers"]
        assert [m["manager"] for m in stored["metadata"]["managedFields"]] == [
            "kube-controller-manager",
            "gpushare-dra",
            "kube-scheduler",
        ]
