"""Making room for an online pod by evicting offline ones: nominate, evict, place, settle.

The write protocol (docs/preemption.md), each step safe to crash after:

1. **Nominate**: the room the pod will take is written as an annotation on each of its
   claims (:mod:`dra_driver.engine.nomination`). From then on every decision, this replica's
   and any other's after a restart, counts that room as taken.
2. **Evict** the victims through the Eviction API. A crash between 1 and 2 leaves a
   nomination whose victims still run: the next pass finds it and evicts them.
3. **Place**: once their claims are released, the pod is decided on with its own hold left
   out, and allocated like any pod. A crash before that finds the hold still counted.
4. **Settle**: once the pod's claims are allocated, the annotations go. A crash before that
   leaves an annotation on an allocated claim, which counts for nothing.

A nomination is dropped when it expires (the victims' grace period plus a margin) or when
its pod is gone or no longer waits, so room is never held for ever.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Sequence
from typing import Final

from dra_driver.api import DriverNames
from dra_driver.controller.evictions import EvictionWriter, Refused
from dra_driver.controller.metrics import ControllerMetrics
from dra_driver.controller.view import ClusterView
from dra_driver.engine import Placed, Policy, Snapshot
from dra_driver.engine.nomination import Nomination, PodRef
from dra_driver.engine.preempt import (
    Blocked,
    Preemption,
    disruption_budget,
    preempt,
    victims,
    wants_preemption,
)
from dra_driver.engine.scan import NodeFit
from dra_driver.k8s import objects
from dra_driver.k8s.events import EventSink, EventType
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.objects import Object
from dra_driver.k8s.timestamps import rfc3339
from dra_driver.logging import get_logger
from dra_driver.structured.configshares import counted_claim

log = get_logger(__name__)

RELEASE_MARGIN_SECONDS: Final = 60
"""Beyond the victims' grace period: time for their claims to be released."""
_EVICTED_REMEMBERED: Final = 4096
_FIRST_RETRY_SECONDS: Final = 5.0
_MAX_RETRY_SECONDS: Final = 60.0


@dataclasses.dataclass(frozen=True)
class Waiting:
    """The pod waits on preemption; say so with ``event`` (``kind``) and ``reason``."""

    reason: str
    event: str
    kind: EventType


class Preemptor:
    """Decides and carries out preemptions for the allocating thread (its only caller)."""

    def __init__(
        self,
        names: DriverNames,
        view: ClusterView,
        *,
        writer: EvictionWriter,
        events: EventSink,
        metrics: ControllerMetrics,
        policy: Policy,
        clock: Callable[[], float],
    ) -> None:
        self._names = names
        self._view = view
        self._writer = writer
        self._events = events
        self._metrics = metrics
        self._policy = policy
        self._clock = clock
        # Evicted by this process: the pod cache may not show the deletion at the next pass.
        # Insertion-ordered, and trimmed, so a long-lived leader does not grow it for ever.
        self._evicted: dict[str, None] = {}
        # Pod UID -> when to search again, the pause, and what it waits for meanwhile: a search
        # costs up to a second on a large cluster full of offline work, and a pod that fits
        # nowhere is looked at on every claim change.
        self._retry: dict[str, tuple[float, float, Waiting | None]] = {}

    def own_holds(self, snapshot: Snapshot, pod: Object, claims: Sequence[Object]) -> list[str]:
        """Return the UIDs of ``claims`` whose room is held for ``pod``: its decision skips them."""
        uid = objects.uid(pod)
        return [
            objects.uid(claim)
            for claim in claims
            if (held := snapshot.held.get(objects.uid(claim))) is not None
            and held.nomination.pod.uid == uid
        ]

    def sweep(self) -> None:
        """Drop nominations that expired, or whose pod is gone or waits no more."""
        snapshot = self._view.snapshot()
        now = self._clock()
        for held in list(snapshot.held.values()):
            nomination = held.nomination
            pod = self._view.pods.get(nomination.pod.namespace, nomination.pod.name)
            expired = nomination.expired(now)
            if (
                not expired
                and pod is not None
                and objects.uid(pod) == nomination.pod.uid
                and objects.has_scheduling_gate(pod, self._names.scheduling_gate)
            ):
                continue
            self._drop(held.claim, "expired" if expired else "pod_gone")

    def settle(self, claims: Sequence[Object]) -> None:
        """Remove the nominations of claims that are allocated now."""
        for claim in claims:
            # As the view has it now: the commit that came first wrote the claim again.
            current = self._view.claim(*object_key(claim)) or claim
            annotations = objects.metadata(current).get("annotations") or {}
            if self._names.nomination_annotation in annotations:
                self._view.assume(self._writer.nominate(current, None), in_place=True)

    def attempt(
        self,
        pod: Object,
        pending: Sequence[Object],
        *,
        pinned: Sequence[Object],
        node_fit: NodeFit,
    ) -> Waiting | None:
        """Nominate and evict for ``pod``, which fits nowhere; ``None``: preemption cannot help."""
        snapshot = self._view.snapshot()
        if not wants_preemption(snapshot, pod, pending):
            return None
        uids = self.own_holds(snapshot, pod, pending)
        if uids and len(uids) == len(pending):
            return self._carry_on(snapshot.held[uids[0]].nomination)
        for uid in uids:
            # Only some claims were nominated (an error or a crash between the writes, which
            # all come before any eviction): the rest of the room is not held. Start afresh.
            self._drop(snapshot.held[uid].claim, "incomplete")
        pod_uid, now = objects.uid(pod), self._clock()
        retry = self._retry.get(pod_uid)
        if retry is not None and now < retry[0]:
            return retry[2]  # searched lately for nothing: the worker has other pods to place
        found = self._search(snapshot, pod, pending, pinned, node_fit)
        if found is None or isinstance(found, Blocked):
            pause = min(2 * retry[1], _MAX_RETRY_SECONDS) if retry else _FIRST_RETRY_SECONDS
            waiting = None
            if isinstance(found, Blocked):
                self._metrics.preemptions.labels("blocked").inc()
                waiting = Waiting(found.reason, "PreemptionBlocked", "Warning")
            self._retry[pod_uid] = (now + pause, pause, waiting)
            while len(self._retry) > _EVICTED_REMEMBERED:
                del self._retry[next(iter(self._retry))]
            return waiting
        self._retry.pop(pod_uid, None)
        return self._nominate(pod, pending, found, snapshot)

    def _search(
        self,
        snapshot: Snapshot,
        pod: Object,
        pending: Sequence[Object],
        pinned: Sequence[Object],
        node_fit: NodeFit,
    ) -> Preemption | Blocked | None:
        candidates = victims(snapshot, pod, self._view.pods.get)
        if not candidates:
            return None
        budgets = [disruption_budget(pdb) for pdb in self._view.budgets.list()]
        return preempt(
            snapshot,
            pod,
            pending,
            self._policy,
            candidates=candidates,
            budgets=budgets,
            pinned=pinned,
            node_fit=node_fit,
        )

    def _nominate(
        self, pod: Object, pending: Sequence[Object], found: Preemption, snapshot: Snapshot
    ) -> Waiting:
        grace = max(victim.grace for victim in found.victims)
        expires = datetime.datetime.fromtimestamp(
            self._clock() + grace + RELEASE_MARGIN_SECONDS, datetime.UTC
        )
        ref = PodRef(objects.namespace(pod), objects.name(pod), objects.uid(pod))
        refs = tuple(victim.pod for victim in found.victims)
        # As the view has them now: a partial nomination may just have been dropped.
        by_uid = {objects.uid(c): self._view.claim(*object_key(c)) or c for c in pending}
        for claim_uid, results in _held_results(snapshot, by_uid, found.placed).items():
            nomination = Nomination(ref, found.node, rfc3339(expires), refs, results)
            written = self._writer.nominate(by_uid[claim_uid], nomination.encode())
            self._view.assume(written, in_place=True)
        names = ", ".join(victim.key for victim in refs)
        devices = ", ".join(
            sorted({str(r["device"]) for a in found.placed.claims for r in a.results})
        )
        self._metrics.preemptions.labels("nominated").inc()
        self._events.record(
            pod,
            "Normal",
            "Preempting",
            f"evicting offline pod(s) {names} from {found.node} ({devices}) to make room",
        )
        log.info("preemption.nominated", node=found.node, devices=devices, victims=names)
        return self._carry_on(Nomination(ref, found.node, rfc3339(expires), refs, ()))

    def _carry_on(self, nomination: Nomination) -> Waiting:
        """Evict the nomination's victims still running; say what the pod waits for."""
        running, refused = [], []
        for victim in nomination.victims:
            current = self._view.pods.get(victim.namespace, victim.name)
            if current is None or objects.uid(current) != victim.uid:
                continue
            running.append(victim.key)
            if objects.is_deleting(current) or victim.uid in self._evicted:
                continue
            outcome = self._writer.evict(victim)
            if isinstance(outcome, Refused):
                refused.append(f"{victim.key}: {outcome.message}")
                log.info("preemption.eviction_refused", victim=victim.key, message=outcome.message)
                continue
            self._evicted[victim.uid] = None
            while len(self._evicted) > _EVICTED_REMEMBERED:
                del self._evicted[next(iter(self._evicted))]
            self._metrics.preemption_victims.inc()
            self._events.record(
                current,
                "Warning",
                "Preempted",
                f"evicted to make room on {nomination.node} for online pod {nomination.pod.key}",
            )
            log.info("preemption.evicted", victim=victim.key, online=nomination.pod.key)
        waits = ", ".join(running) if running else "their claims"
        reason = (
            f"nominated to {nomination.node} until {nomination.expires}: waiting for "
            f"preempted pod(s) {waits} to release their shares"
        )
        if refused:
            reason += f"; eviction refused: {'; '.join(refused)}"
        return Waiting(reason, "WaitingForPreemption", "Normal")

    def _drop(self, claim: Object, why: str) -> None:
        current = self._view.claim(*object_key(claim)) or claim
        self._view.assume(self._writer.nominate(current, None), in_place=True)
        self._metrics.preemptions.labels(why).inc()
        log.info("preemption.dropped", claim="/".join(object_key(claim)), why=why)


def _held_results(
    snapshot: Snapshot, claims: dict[str, Object], placed: Placed
) -> dict[str, tuple[Object, ...]]:
    """Return each claim's planned results as counted (config-sized shares get their size)."""
    held = {}
    for allocation in placed.claims:
        planned = {
            **claims[allocation.uid],
            "status": {"allocation": allocation.status(rfc3339())},
        }
        if snapshot.share_plain:
            planned = counted_claim(planned, snapshot.names, snapshot.capacities)
        results = planned["status"]["allocation"]["devices"]["results"]
        held[allocation.uid] = tuple(
            {k: r[k] for k in ("request", "driver", "pool", "device", "shareID",
                               "consumedCapacity") if k in r}
            for r in results
        )  # fmt: skip
    return held
