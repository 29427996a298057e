"""A leader writes its allocation and finalizer in one round trip, and trusts only its checks.

Without leader election the finalizer commits a checked allocation; a leader holding its
Lease firmly has no rival replica, so it sends the finalizer with the allocation and
remembers what it checked. These tests pin both paths on the harness's API server (the
request log shows which requests were in flight together) and the leader's rules on exact
interleavings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from controller.interleave import claim_obj, make, pod_obj, settle
from controller.kit import NAMES, node
from controller.test_controller_e2e import bound, claims, gated_pod, harness, template
from gpushare_simulator.harness.apiserver.app import LoggedRequest
from gpushare_simulator.harness.apiserver.routing import RequestInfo
from gpushare_simulator.harness.cluster import FakeCluster
from prometheus_client import CollectorRegistry

from dra_driver.controller.app import Controller
from dra_driver.controller.settings import ControllerSettings
from dra_driver.k8s.errors import RetryableError
from dra_driver.k8s.reconcile import Requeue
from dra_driver.structured.configshares import SCHEDULER_FINALIZER

Object = dict[str, Any]
LEADER_ELECTION = {
    "leader_election_namespace": "default",
    "lease_duration": 3,
    "renew_deadline": 2,
    "retry_period": 1,
}


@contextmanager
def controller(cluster: FakeCluster, *, elected: bool) -> Iterator[Controller]:
    """Run one replica, leader-elected (and leading) or without leader election."""
    values: dict[str, Any] = {"resync_seconds": 1.0, "leader_elect": elected}
    if elected:
        values.update(LEADER_ELECTION)
    running = Controller(cluster.api, NAMES, ControllerSettings(**values), CollectorRegistry())
    running.start()
    try:
        cluster.wait_for(lambda: running.leading, "the replica to lead", timeout=15)
        yield running
    finally:
        running.stop()


def is_claim_write(request: RequestInfo) -> bool:
    """Whether the request writes a claim (its status or the rest, by update or patch)."""
    return request.verb in ("update", "patch") and request.resource.startswith("resourceclaims")


def allocate_one(cluster: FakeCluster, *, elected: bool) -> dict[tuple[str, str], LoggedRequest]:
    """Allocate one gated pod with the first claim write held back 0.3 s.

    Returns the first write of each kind (verb, resource) about the pod and its claim: the
    controller's, since kube-scheduler's reservation only comes after the gate.
    """
    cluster.server.faults.inject(when=is_claim_write, delay=0.3, times=1)
    cluster.apply([template("share", "30", "4Gi")])
    with controller(cluster, elected=elected):
        log = cluster.server.record_requests()
        cluster.apply([gated_pod("p", "share")])
        cluster.wait_for(lambda: bound(cluster, "p"), "the pod to be bound")
    (claim,) = claims(cluster)
    assert NAMES.finalizer in claim["metadata"]["finalizers"]
    first: dict[tuple[str, str], LoggedRequest] = {}
    for request in log:
        if request.name.startswith("p") and request.verb in ("update", "patch"):
            first.setdefault((request.verb, request.resource), request)
    return first


def answered(
    by_kind: dict[tuple[str, str], LoggedRequest], verb: str
) -> tuple[LoggedRequest, LoggedRequest, LoggedRequest, float, float]:
    """Return the allocation, finalizer and gate writes, and when the first two were answered."""
    status = by_kind[(verb, "resourceclaims/status")]
    finalizer = by_kind[(verb, "resourceclaims")]
    assert status.done is not None
    assert finalizer.done is not None
    return status, finalizer, by_kind[("patch", "pods")], status.done, finalizer.done


def test_a_leader_writes_allocation_and_finalizer_together_then_the_gate(
    work_dir: Path,
) -> None:
    """Leading firmly: status and finalizer patches overlap; the gate follows both answers."""
    with harness(work_dir, node("node-a", 1)) as cluster:
        by_kind = allocate_one(cluster, elected=True)
    status, finalizer, gate, status_done, finalizer_done = answered(by_kind, "patch")
    assert status.at < finalizer_done  # in flight together
    assert finalizer.at < status_done
    assert gate.at >= max(status_done, finalizer_done)
    # Reserved for the pod with the allocation: kube-scheduler binds without a claim write.
    assert ("update", "resourceclaims/status") not in by_kind


def test_without_leader_election_the_finalizer_comes_between_allocation_and_gate(
    work_dir: Path,
) -> None:
    """No Lease: allocation, then the finalizer (the commit), then the gate, one at a time."""
    with harness(work_dir, node("node-a", 1)) as cluster:
        by_kind = allocate_one(cluster, elected=False)
    _, finalizer, gate, status_done, finalizer_done = answered(by_kind, "patch")
    assert status_done <= finalizer.at
    assert finalizer_done <= gate.at


def test_a_leader_whose_lease_is_not_firm_writes_nothing() -> None:
    """A late renewal holds the leader back: no allocation and no gate until it is firm."""
    firm = [False]
    _, server, allocator, _, _ = make(node("n", 1), alone=lambda: firm[0])
    server.put("claims", claim_obj("x", "25", "4Gi"))
    server.put("pods", pod_obj("px", "x"))
    with pytest.raises(Requeue, match="Lease"):
        allocator.reconcile(("default", "px"))
    assert server.pending == []
    firm[0] = True
    settle(allocator, server, "px")
    (claim,) = server.claims()
    assert claim["status"]["allocation"]
    assert NAMES.finalizer in claim["metadata"]["finalizers"]
    assert not server.objs[("pods", "default", "px")]["spec"]["schedulingGates"]


def test_a_leaders_check_clears_its_claim_and_finalizer_when_it_collides() -> None:
    """kube-scheduler's allocation landed unseen before ours: ours is cleared, the pod waits."""
    _, server, allocator, _, events = make(node("n", 1), alone=lambda: True)
    server.put("claims", claim_obj("x", "75", "4Gi"))
    server.put("pods", pod_obj("px", "x"))
    with pytest.raises(Requeue):
        allocator.reconcile(("default", "px"))  # decides on an empty card; not seen yet
    foreign = claim_obj("y", "50", "4Gi")
    foreign["metadata"]["finalizers"] = [SCHEDULER_FINALIZER]
    (ours,) = [c for c in server.claims() if c["metadata"]["name"] == "x"]
    foreign["status"] = {"allocation": ours["status"]["allocation"]}  # same card
    server.put("claims", foreign, deliver=False)
    server.deliver()
    with pytest.raises(Requeue):
        allocator.reconcile(("default", "px"))
    (x,) = [c for c in server.claims() if c["metadata"]["name"] == "x"]
    assert not (x.get("status") or {}).get("allocation")
    assert NAMES.finalizer not in (x["metadata"].get("finalizers") or [])
    assert server.objs[("pods", "default", "px")]["spec"]["schedulingGates"]
    assert any(reason == "AllocationCollided" for _, reason, _ in events.items)


def test_a_new_leader_checks_again_what_the_last_one_left_gated() -> None:
    """A claim with allocation and finalizer but a gated pod is checked by the next leader."""
    _, server, first, _, _ = make(node("n", 1), alone=lambda: True)
    server.put("claims", claim_obj("x", "75", "4Gi"))
    server.put("pods", pod_obj("px", "x"))
    with pytest.raises(Requeue):
        first.reconcile(("default", "px"))  # written; the leader then stopped
    server.deliver()
    (ours,) = server.claims()
    foreign = claim_obj("y", "50", "4Gi")
    foreign["metadata"]["finalizers"] = [SCHEDULER_FINALIZER]
    foreign["status"] = {"allocation": ours["status"]["allocation"]}
    _, store, second, _, _ = make(node("n", 1), alone=lambda: True)  # a new process
    store.objs = server.objs
    store.put("claims", foreign, deliver=False)
    store.deliver(
        [("claims", obj) for (kind, *_), obj in server.objs.items() if kind == "claims"]
        + [("pods", server.objs[("pods", "default", "px")])]
    )
    with pytest.raises(Requeue):
        second.reconcile(("default", "px"))
    (x,) = [c for c in server.claims() if c["metadata"]["name"] == "x"]
    assert not (x.get("status") or {}).get("allocation")
    assert server.objs[("pods", "default", "px")]["spec"]["schedulingGates"]


def test_the_allocation_reserves_the_claim_for_its_pod() -> None:
    """The allocation comes reserved for the pod it was made for, in both write paths."""
    for alone in (None, lambda: True):
        _, server, allocator, _, _ = make(node("n", 1), alone=alone)
        server.put("claims", claim_obj("x", "25", "4Gi"))
        server.put("pods", pod_obj("px", "x"))
        settle(allocator, server, "px")
        (claim,) = server.claims()
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": "px", "uid": "pod-px"}
        ]


def test_a_claim_reserved_for_a_pod_deleted_while_gated_is_released() -> None:
    """Its reservation names a pod that is gone: the releaser frees the card at once."""
    view, server, allocator, releaser, _ = make(node("n", 1), alone=lambda: True)
    server.put("claims", claim_obj("x", "25", "4Gi"))
    server.put("pods", pod_obj("px", "x"))
    with pytest.raises(Requeue):
        allocator.reconcile(("default", "px"))  # allocated and reserved, not checked yet
    server.deliver()
    del server.objs[("pods", "default", "px")]
    view.pods._cache.pop(("default", "px"))  # the pod watch saw it go
    releaser.reconcile(("default", "x"))
    server.deliver()
    releaser.reconcile(("default", "x"))
    (claim,) = server.claims()
    assert not (claim.get("status") or {}).get("allocation")
    assert not (claim.get("status") or {}).get("reservedFor")
    assert NAMES.finalizer not in (claim["metadata"].get("finalizers") or [])


def test_a_leader_ungates_what_it_checked_without_another_claim_write() -> None:
    """After its check the leader's only write is the gate: the finalizer came with the claim."""
    _, server, allocator, _, _ = make(node("n", 1), alone=lambda: True)
    server.put("claims", claim_obj("x", "25", "4Gi"))
    server.put("pods", pod_obj("px", "x"))
    with pytest.raises(Requeue):
        allocator.reconcile(("default", "px"))
    server.deliver()
    allocator.reconcile(("default", "px"))
    kinds = [kind for kind, _ in server.pending]
    assert kinds == ["pods"]


def test_a_new_leader_never_clears_an_allocation_a_pod_already_runs_on() -> None:
    """Shared claim: one pod ungated on it, one still gated; a collision clears nothing."""
    _, server, first, _, _ = make(node("n", 1), alone=lambda: True)
    server.put("claims", claim_obj("x", "75", "4Gi"))
    server.put("pods", pod_obj("px", "x"))
    settle(first, server, "px")  # checked and ungated by the first leader
    (ours,) = server.claims()
    foreign = claim_obj("y", "50", "4Gi")
    foreign["metadata"]["finalizers"] = [SCHEDULER_FINALIZER]
    foreign["status"] = {"allocation": ours["status"]["allocation"]}
    _, store, second, _, _ = make(node("n", 1), alone=lambda: True)  # a new process
    store.objs = server.objs
    store.put("claims", foreign, deliver=False)
    store.put("pods", pod_obj("pw", "x"), deliver=False)
    store.deliver(
        [("claims", obj) for (kind, *_), obj in server.objs.items() if kind == "claims"]
        + [(kind, obj) for (kind, *_), obj in server.objs.items() if kind == "pods"]
    )
    settle(second, store, "pw")
    (x,) = [c for c in server.claims() if c["metadata"]["name"] == "x"]
    assert x["status"]["allocation"] == ours["status"]["allocation"]
    assert not server.objs[("pods", "default", "pw")]["spec"]["schedulingGates"]


def test_a_leader_never_ungates_a_claim_whose_finalizer_write_failed() -> None:
    """The allocation landed, the finalizer twice not: the gate stays until the finalizer is on."""
    _, server, allocator, _, _ = make(node("n", 1), alone=lambda: True)
    server.put("claims", claim_obj("x", "25", "4Gi"))
    server.put("pods", pod_obj("px", "x"))
    failures = {"add_finalizer": 1}
    allocate, add_finalizer = server.allocate_protected, server.add_finalizer

    def allocation_only(claim: Object, allocation: Object, reserved_for: list[Object]) -> Object:
        # As when the status patch lands and the finalizer patch beside it gets a 500.
        server.write_allocation(claim, allocation, reserved_for)
        raise RetryableError("500 InternalError: injected fault")

    def failing_once(claim: Object) -> Object:
        if failures["add_finalizer"]:
            failures["add_finalizer"] -= 1
            raise RetryableError("500 InternalError: injected fault")
        return add_finalizer(claim)

    server.allocate_protected = allocation_only  # type: ignore[method-assign]
    server.add_finalizer = failing_once  # type: ignore[method-assign]
    with pytest.raises(RetryableError):
        allocator.reconcile(("default", "px"))
    server.allocate_protected = allocate  # type: ignore[method-assign]
    server.deliver()
    with pytest.raises(RetryableError):
        allocator.reconcile(("default", "px"))  # checked; its finalizer write fails
    assert server.objs[("pods", "default", "px")]["spec"]["schedulingGates"]
    settle(allocator, server, "px")
    (claim,) = server.claims()
    assert not server.objs[("pods", "default", "px")]["spec"]["schedulingGates"]
    assert NAMES.finalizer in claim["metadata"]["finalizers"]
