"""A pod's own needs on a node, judged as kube-scheduler's NodeResourcesFit and NodePorts do."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from dra_driver.k8s.podfit import Demand, NodeUsage, demand, unfit

Object = dict[str, Any]
EVERY = "0.0.0.0"  # noqa: S104 - a host port's "every address", nothing binds here


def container(
    name: str, *, cpu: str | None = None, memory: str | None = None, **extra: Any
) -> Object:
    """Return a container with the given requests."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "resources": {"requests": requests}, **extra}


def pod(uid: str = "p", node: str = "", **spec: Any) -> Object:
    """Return a pod (bound to ``node`` when given)."""
    spec.setdefault("containers", [container("main", cpu="1")])
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": uid, "uid": uid}, "spec": spec, "status": {"phase": "Running"}}


def node(name: str = "n", **allocatable: str) -> Object:
    """Return a node with ``status.allocatable``."""
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


def test_containers_add_up_and_init_containers_take_the_peak():
    """Containers sum; a plain init container counts only if it needs more than they do."""
    spec = {
        "containers": [container("a", cpu="500m", memory="1Gi"), container("b", cpu="1")],
        "initContainers": [container("init", cpu="2", memory="512Mi")],
    }
    need = demand(pod(**spec))
    assert need.resources == {"cpu": Fraction(2), "memory": Fraction(2**30)}


def test_sidecars_run_beside_containers_and_later_init_containers():
    """A sidecar adds to the containers and to every init container started after it."""
    spec = {
        "containers": [container("main", cpu="1")],
        "initContainers": [
            container("proxy", cpu="1", restartPolicy="Always"),
            container("migrate", cpu="3"),
        ],
    }
    assert demand(pod(**spec)).resources == {"cpu": Fraction(4)}


def test_overhead_adds_and_pod_level_requests_replace_the_sum():
    """Pod overhead comes on top; pod-level requests replace what they name."""
    spec = {
        "containers": [container("main", cpu="1", memory="1Gi")],
        "overhead": {"cpu": "250m"},
        "resources": {"requests": {"memory": "3Gi"}},
    }
    need = demand(pod(**spec))
    assert need.resources == {"cpu": Fraction(5, 4), "memory": Fraction(3 * 2**30)}


def test_host_ports_are_collected_with_protocol_and_address():
    """Only ports with a hostPort count; protocol defaults to TCP, address to every address."""
    ports = [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "protocol": "UDP",
             "hostPort": 53, "hostIP": "10.0.0.1"}, {"containerPort": 9090}]  # fmt: skip
    need = demand(pod(containers=[container("main", ports=ports)]))
    assert need.ports == {("TCP", EVERY, 8080), ("UDP", "10.0.0.1", 53)}


@pytest.mark.parametrize(
    ("need", "used", "pods", "expected"),
    [
        ({"cpu": Fraction(1)}, {"cpu": Fraction(1)}, 1, None),
        ({"cpu": Fraction(2)}, {"cpu": Fraction(1)}, 1, "Insufficient cpu"),
        ({"cpu": Fraction(1), "nvidia.com/x": Fraction(1)}, {}, 0, "Insufficient nvidia.com/x"),
        ({}, {}, 3, "Too many pods"),
    ],
)
def test_requests_and_pod_count_against_allocatable(need, used, pods, expected):
    """Each request plus what the node's pods use must fit allocatable; so must one more pod."""
    assert unfit(Demand(need, frozenset()), node(cpu="2", pods="3"), used, pods, []) == expected


@pytest.mark.parametrize(
    ("mine", "theirs", "conflict"),
    [
        (("TCP", EVERY, 80), ("TCP", "10.0.0.1", 80), True),
        (("TCP", "10.0.0.2", 80), ("TCP", "10.0.0.1", 80), False),
        (("UDP", EVERY, 80), ("TCP", EVERY, 80), False),
        (("TCP", "10.0.0.1", 80), ("TCP", "10.0.0.1", 80), True),
    ],
)
def test_host_ports_conflict_on_protocol_port_and_overlapping_address(mine, theirs, conflict):
    """Ports clash on one protocol and port when either address is every address, or both match."""
    reason = unfit(Demand({}, frozenset({mine})), node(pods="10"), {}, 1, [theirs])
    assert (reason is not None) is conflict


def test_a_node_without_allocatable_is_not_judged():
    """A node that reports no allocatable (not a real kubelet's) is left to kube-scheduler."""
    assert (
        unfit(Demand({"cpu": Fraction(100)}, frozenset()), {"metadata": {"name": "n"}}, {}, 0, [])
        is None
    )


def test_usage_counts_bound_unfinished_pods_only():
    """Bound pods count until they finish or go; unbound ones never do."""
    usage = NodeUsage()
    need = Demand({"cpu": Fraction(1)}, frozenset())
    usage.update(pod("a", node="n"))
    usage.update(pod("b"))
    assert usage.unfit(need, node(cpu="1")) == "Insufficient cpu"
    finished = pod("a", node="n")
    finished["status"]["phase"] = "Succeeded"
    usage.update(finished)
    assert usage.unfit(need, node(cpu="1")) is None
    usage.update(pod("c", node="n"))
    usage.update(pod("c", node="n"), deleted=True)
    assert usage.unfit(need, node(cpu="1", pods="1")) is None


def test_an_assumed_pod_counts_until_bound_and_an_update_before_does_not_drop_it():
    """A pod pinned by the controller counts at once; its ungating event does not uncount it."""
    usage = NodeUsage()
    need = Demand({"cpu": Fraction(1)}, frozenset())
    usage.assume(pod("a"), "n")
    usage.update(pod("a"))
    assert usage.unfit(need, node(cpu="1")) == "Insufficient cpu"
    usage.update(pod("a", node="n"))
    assert usage.unfit(need, node(cpu="2")) is None
    usage.update(pod("a", node="n"), deleted=True)
    usage.update(pod("a"))
    assert usage.unfit(need, node(cpu="1")) is None
