"""The allocation loop: gated pod in, allocated claims and an ungated pod out.

One worker decides at a time, so every decision sees the previous one's capacity (the engine
is fast; the writes are what take time, and they are few per pod). A pod is reconciled again
whenever something it could be waiting for changes: its claims, slices, classes, nodes, or
any claim's allocation (freed capacity).

A pod goes through two passes. The first decides and writes ``status.allocation``. The
second runs once the claim watch shows those writes, and so every claim write the API server
took before them: if none of their cards is over-committed, the claims are committed, and
only then is the gate removed. Anyone who did not see our decision (a second replica without
leader election, kube-scheduler) and wrote a colliding allocation either wrote before ours,
and our check sees it, or after, and its check sees ours; whoever sees a collision clears
its unchecked claims and decides again. What marks a claim checked, and so never cleared,
depends on leader election (:mod:`dra_driver.controller.commits`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Final, NoReturn

from dra_driver.api import Backend, DriverNames
from dra_driver.controller.commits import Commits
from dra_driver.controller.metrics import ControllerMetrics
from dra_driver.controller.preemption import Preemptor
from dra_driver.controller.quotas import over_quota_now
from dra_driver.controller.rollback import roll_back
from dra_driver.controller.sharing import claim_in_use
from dra_driver.controller.view import ClusterView, pinned_selectors
from dra_driver.controller.writes import ClaimWriter
from dra_driver.engine import (
    Placed,
    Policy,
    Unplaceable,
    class_names,
    place_pod,
    uses_driver,
)
from dra_driver.engine.quotas import decision_breaches
from dra_driver.engine.scan import NodeFit
from dra_driver.k8s import objects
from dra_driver.k8s.events import EventSink, EventType
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import Requeue
from dra_driver.k8s.scheduling import pinned_node
from dra_driver.k8s.timestamps import epoch_seconds, rfc3339
from dra_driver.logging import bound, get_logger
from dra_driver.quota import QuotaBook, describe

PodKey = tuple[str, str]
CATCH_UP: Final[PodKey] = ("", "")
"""Not a pod (no pod has an empty name): the key that catches the snapshot up."""

log = get_logger(__name__)

# Pods that fit nowhere are looked at again on every relevant event; this is the fallback.
_UNPLACEABLE_RETRY_SECONDS: Final = 5.0
# A template's claim echo requeues its pod at once; a named claim's is found by this poll.
_ECHO_POLL_SECONDS: Final = 0.1
# A leader whose Lease renewal is late writes nothing until it is renewed (or lost).
_LEASE_POLL_SECONDS: Final = 0.5
# Two deciders that both saw a collision both back off; a random pause breaks the tie.
_COLLISION_BACKOFF_SECONDS: Final = 0.5


class Allocator:
    """Reconciles one gated pod per call."""

    def __init__(
        self,
        names: DriverNames,
        view: ClusterView,
        *,
        writer: ClaimWriter,
        events: EventSink,
        metrics: ControllerMetrics,
        policy: Policy,
        default_backend: Backend = Backend.HAMI_CORE,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        elected: bool = False,
        alone: Callable[[], bool] = lambda: False,
        quotas: QuotaBook | None = None,
        preemptor: Preemptor | None = None,
    ) -> None:
        self._names = names
        self._preemptor = preemptor
        self._quotas = quotas
        self._default_backend = default_backend
        self._view = view
        self._writer = writer
        self._events = events
        self._metrics = metrics
        self._policy = policy
        self._clock = clock
        self._commits = Commits(names, writer, elected=elected, alone=alone, in_use=self._in_use)
        # Jitter, not secrecy: any generator breaks the tie.
        self._rng = rng or random.Random()  # noqa: S311
        self._last_reason: dict[str, str] = {}
        # Pods whose gate this worker removed, until the pod cache shows it gone: a decision
        # made before the watch catches up must not take them for still waiting.
        self._ungated: dict[PodKey, str] = {}

    def reconcile(self, key: PodKey) -> None:
        """Allocate the pod's claims of this driver and remove its gate, or say why not.

        :data:`CATCH_UP` only brings the snapshot up to date with the claims' changes (this
        thread is the one that changes it), so what the card metrics read is current even
        when no pod is waiting.
        """
        if key == CATCH_UP:
            self._view.snapshot()
            return
        pod = self._view.pods.get(*key)
        if pod is None:
            self._last_reason.pop("/".join(key), None)
            self._ungated.pop(key, None)
            return
        if not objects.has_scheduling_gate(pod, self._names.scheduling_gate):
            self._ungated.pop(key, None)
            return
        if self._ungated.get(key) == objects.uid(pod):
            # Ungated by us; this copy is older than the watch event that will say so (a claim
            # event requeued the pod). Gates are never added back, so there is nothing to do.
            return
        if objects.is_deleting(pod):
            return
        with bound(pod="/".join(key), pod_uid=objects.uid(pod)):
            claims = self._claims(pod) if self._admitted(pod) else None
            if claims is None:
                return
            self._allocate(pod, claims)

    def _admitted(self, pod: Object) -> bool:
        """Whether ours is the pod's last scheduling gate; else say which it waits for.

        A queue (Kueue) keeps its own gate until it admits the pod: capacity held for the pod
        now could starve admitted ones. Removing a gate updates the pod, requeueing it.
        """
        reason = objects.waiting_for_other_gates(pod, self._names.scheduling_gate)
        if reason is not None:
            self._refuse(pod, reason, event="WaitingForSchedulingGates", kind="Normal")
        return reason is None

    def _claims(self, pod: Object) -> list[Object] | None:
        """Return the pod's claims, or ``None`` while one is not created yet (an event follows)."""
        namespace = pod["metadata"]["namespace"]
        claims = []
        for entry, name in objects.pod_claim_names(pod).items():
            claim = self._view.claim(namespace, name) if name else None
            if claim is None:
                log.debug("allocation.waiting_for_claim", entry=entry, claim=name)
                return None
            entries = pod["spec"]["resourceClaims"]
            template = next(
                (e.get("resourceClaimTemplateName") for e in entries if e["name"] == entry), None
            )
            if template and objects.controller_uid(claim) != objects.uid(pod):
                self._refuse(pod, f"claim {name} for entry {entry} is not owned by the pod")
                return None
            claims.append(claim)
        return claims

    def _allocate(self, pod: Object, claims: list[Object]) -> None:
        if not self._commits.may_write():
            raise Requeue(_LEASE_POLL_SECONDS, "waiting for the leader Lease to be renewed")
        if self._preemptor is not None:
            self._preemptor.sweep()
            # The sweep may have written the pod's own claims (its expired nomination dropped).
            claims = [self._view.claim(*object_key(c)) or c for c in claims]
        classes = self._view.snapshot().classes
        missing = sorted({name for c in claims for name in class_names(c)} - set(classes))
        if missing:
            # The webhook gated the pod for a class of ours that is not here (yet, or any
            # more): ungating would hand the claim to kube-scheduler, and our policy is lost.
            self._refuse(pod, f"waiting for DeviceClass {', '.join(missing)} to exist")
            raise Requeue(_UNPLACEABLE_RETRY_SECONDS, "missing DeviceClass")
        ours = [c for c in claims if uses_driver(c, classes, self._names.driver)]
        pending = [c for c in ours if not objects.status(c).get("allocation")]
        if any(objects.is_deleting(c) for c in pending):
            self._refuse(pod, "a claim of the pod is being deleted")
            return
        if pending:
            self._decide(pod, claims, ours, pending)
        if not ours:
            log.info("allocation.not_ours", reason="no claim uses a DeviceClass of this driver")
        elif not self._view.nodes_overlap(pinned_selectors(claims)):
            self._refuse(pod, "the pod's claims are allocated on nodes that do not overlap")
            return
        else:
            self._commit(pod, ours)
            self._hold_if_in_use(pod, ours, classes)
            if self._preemptor is not None:
                self._preemptor.settle(ours)
        if not self._writer.remove_gate(pod, self._names.scheduling_gate):
            return
        self._ungated[object_key(pod)] = objects.uid(pod)
        node = pinned_node(ours)
        if node is not None:  # the next decision counts the pod there before it is bound
            self._view.usage.assume(pod, node)
        self._last_reason.pop(_pod_key(pod), None)
        created = objects.metadata(pod).get("creationTimestamp")
        if created:
            self._metrics.allocation_latency_seconds.observe(
                max(0.0, self._clock() - epoch_seconds(created))
            )
        log.info("allocation.ungated")

    def _decide(
        self, pod: Object, claims: list[Object], ours: list[Object], pending: list[Object]
    ) -> NoReturn:
        """Place the pending claims and write them, or make room, or say why not."""
        pinned, node_fit = pinned_selectors(claims), self._view.node_fit(pod)
        snapshot = self._view.snapshot()
        held = self._preemptor.own_holds(snapshot, pod, pending) if self._preemptor else []
        started = time.perf_counter()
        with snapshot.without(held):  # the room its nomination holds is the pod's own
            decision = place_pod(
                snapshot, pod, pending, self._policy, pinned=pinned, node_fit=node_fit
            )
        self._metrics.decision_seconds.observe(time.perf_counter() - started)
        if isinstance(decision, Unplaceable):
            self._unplaceable(pod, ours, decision)
            if not decision.refused:
                self._preempt(pod, pending, pinned, node_fit)
            self._fail(pod, decision)
        self._hold_within_quotas(pod, decision)
        self._write(pod, pending, decision)
        raise Requeue(_ECHO_POLL_SECONDS, "checking the allocation once the watch shows it")

    def _write(self, pod: Object, pending: list[Object], decision: Placed) -> None:
        by_uid = {objects.uid(c): c for c in pending}
        # Reserved for the pod at once, as kube-scheduler would at PreBind: it then finds the
        # claim reserved and binds the pod without writing the claim again.
        reference = {"resource": "pods", "name": pod["metadata"]["name"], "uid": objects.uid(pod)}
        lines = []
        for allocation in decision.claims:
            claim = by_uid[allocation.uid]
            if self._names.finalizer in (claim["metadata"].get("finalizers") or []):
                # Left by a release that stopped half-way: on a new allocation it would commit
                # that allocation unchecked.
                claim = self._writer.remove_finalizer(claim)
                self._view.assume(claim, in_place=True)
            key = object_key(claim)
            self._view.writing.add(key)  # the releaser must not act on half of the writes
            try:
                written = self._commits.write(claim, allocation.status(rfc3339()), [reference])
                self._view.assume(written, in_place=True)
            finally:
                self._view.writing.discard(key)
            shares = ", ".join(
                f"{r['request']} -> {r['device']} ({_consumed(r)})" for r in allocation.results
            )
            lines.append(f"{allocation.key}: {shares}")
        self._metrics.allocations.labels("allocated").inc()
        # No event: as for kube-scheduler's own allocations, the claim's status says where each
        # share is and the pod gets kube-scheduler's Scheduled event; an event would be one
        # more write per pod, to the API server and etcd, for what the claim records.
        log.info("allocation.allocated", node=decision.node, shares="; ".join(lines))

    def _commit(self, pod: Object, ours: list[Object]) -> None:
        """Check the pod's unchecked claims and commit them, or clear them if they collide.

        Returns once every claim is committed; raises :class:`Requeue` while the watch has not
        shown our writes yet, and after clearing colliding ones.
        """
        unchecked = self._commits.unchecked(ours)
        if not unchecked:
            return
        if not self._view.has_seen(unchecked):
            raise Requeue(_ECHO_POLL_SECONDS, "waiting for the claim watch to show our writes")
        snapshot = self._view.snapshot()
        collisions = snapshot.overcommitted(unchecked)
        if self._quotas is not None:
            # Another decider (a second replica, kube-scheduler) may have taken the room too.
            collisions += over_quota_now(
                snapshot, self._quotas.of(objects.namespace(pod)), unchecked
            )
        if collisions:
            self._collided(pod, unchecked, collisions)
        for claim in self._commits.checked(unchecked):
            self._view.assume(claim, in_place=True)
        log.info("allocation.committed", claims=len(unchecked))

    def _hold_within_quotas(self, pod: Object, decision: Placed) -> None:
        """Keep the pod gated if its claims would take a quota of its namespace over ``hard``."""
        quotas = self._quotas.of(objects.namespace(pod)) if self._quotas is not None else []
        found = (
            decision_breaches(self._view.snapshot(), quotas, decision, rfc3339()) if quotas else []
        )
        if found:
            self._metrics.allocations.labels("quota").inc()
            self._refuse(pod, describe(found), event="QuotaExceeded")
            raise Requeue(_UNPLACEABLE_RETRY_SECONDS, "a GpuShareQuota of the namespace is full")

    def _in_use(self, claim: Object) -> bool:
        """Whether an ungated pod may run on the claim: one it is reserved for or that uses it.

        The controller reserves a claim for the pod it allocates it for, so a reservation
        alone says nothing.
        """
        gate = self._names.scheduling_gate
        namespace = claim["metadata"]["namespace"]
        for reference in objects.status(claim).get("reservedFor") or []:
            pod = self._view.pods.get(namespace, str(reference.get("name")))
            if pod is None or objects.uid(pod) != reference.get("uid"):
                return True  # a pod this cache does not know yet: assume it runs
            if not objects.has_scheduling_gate(pod, gate):
                return True
        return any(
            not objects.has_scheduling_gate(pod, gate) for pod in self._view.pods_using(claim)
        )

    def _hold_if_in_use(self, pod: Object, ours: list[Object], classes: dict[str, Object]) -> None:
        """Keep the gate while another pod uses a claim that serves one pod at a time."""
        pods = self._view.pods.list()
        reason = claim_in_use(
            pod,
            ours,
            pods,
            classes,
            names=self._names,
            default_backend=self._default_backend,
            ungated=set(self._ungated.values()),
        )
        if reason is not None:
            self._refuse(pod, reason, event="ClaimInUse")
            raise Requeue(_UNPLACEABLE_RETRY_SECONDS, "a claim of the pod is in use by another")

    def _collided(self, pod: Object, unchecked: list[Object], collisions: list[str]) -> None:
        for claim in unchecked:
            cleared = self._writer.clear_allocation(claim)
            # A leader's claim got our finalizer with its allocation; it protects nothing now.
            self._view.assume(self._writer.remove_finalizer(cleared), in_place=True)
        self._metrics.allocations.labels("collided").inc()
        reason = "; ".join(collisions)
        self._events.record(
            pod, "Warning", "AllocationCollided", f"{reason}; cleared ours and deciding again"
        )
        log.warning("allocation.collided", collisions=collisions)
        raise Requeue(self._rng.uniform(0, _COLLISION_BACKOFF_SECONDS), "allocation collided")

    def _unplaceable(self, pod: Object, ours: list[Object], decision: Unplaceable) -> None:
        """Count the outcome; start afresh at once if claims of an earlier attempt went back."""
        result = "refused" if decision.refused else "unplaceable"
        self._metrics.allocations.labels(result).inc()
        if roll_back(self._view, self._writer, pod, ours):
            raise Requeue(0.0, "released a partial allocation; trying all claims afresh")

    def _preempt(
        self, pod: Object, pending: list[Object], pinned: list[Object], node_fit: NodeFit
    ) -> None:
        """Wait on evictions instead, when evicting offline pods lets an online one fit."""
        if self._preemptor is None:
            return
        waiting = self._preemptor.attempt(pod, pending, pinned=pinned, node_fit=node_fit)
        if waiting is not None:
            self._refuse(pod, waiting.reason, event=waiting.event, kind=waiting.kind)
            raise Requeue(_UNPLACEABLE_RETRY_SECONDS, waiting.reason)

    def _fail(self, pod: Object, decision: Unplaceable) -> NoReturn:
        key = _pod_key(pod)
        if self._last_reason.get(key) != decision.reason:
            self._last_reason[key] = decision.reason
            reason = "InvalidClaim" if decision.refused else "FailedAllocation"
            self._events.record(pod, "Warning", reason, decision.reason)
            log.info("allocation.unplaceable", refused=decision.refused, reason=decision.reason)
        raise Requeue(_UNPLACEABLE_RETRY_SECONDS, decision.reason)

    def _refuse(
        self,
        pod: Object,
        reason: str,
        *,
        event: str = "FailedAllocation",
        kind: EventType = "Warning",
    ) -> None:
        key = _pod_key(pod)
        if self._last_reason.get(key) != reason:
            self._last_reason[key] = reason
            self._events.record(pod, kind, event, reason)
            log.info("allocation.waiting", reason=reason)


def _pod_key(pod: Object) -> str:
    """Key the last reported reason by pod name: a deleted pod's entry is dropped by name."""
    return "/".join(object_key(pod))


def _consumed(result: Object) -> str:
    consumed = result.get("consumedCapacity")
    if not consumed:
        return "whole device"
    return ", ".join(f"{name} {value}" for name, value in sorted(consumed.items()))
