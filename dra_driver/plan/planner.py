"""Place a workload's pods one after another with the allocation engine, once per policy.

Each policy starts from its own fresh snapshot of the cluster. Pods are placed in file order,
as if created in that order and allocated one at a time as the controller does, and every
allocation is counted before the next pod, so later pods see the capacity taken. A claim
shared by several pods is allocated for the first of them; the others must go to its node.
A pod whose allocation would take a GpuShareQuota of its namespace over ``hard`` is held
back, as the controller holds it (:mod:`dra_driver.plan.quotas`). An online pod that fits
nowhere may preempt offline pods, as the controller's does: it is placed, and its victims
leave the plan's picture (:mod:`dra_driver.plan.preemption`).
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

from dra_driver.api import DriverNames, Placement
from dra_driver.api.fields import CORES, MEMORY
from dra_driver.engine import (
    ClaimAllocation,
    Placed,
    Policy,
    Snapshot,
    Unplaceable,
    node_selector,
    place_pod,
    uses_driver,
)
from dra_driver.engine.preempt import Blocked
from dra_driver.engine.quotas import decision_breaches
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import parse_quantity
from dra_driver.plan.admission import pod_refusal, refusals, unused_problems
from dra_driver.plan.budgets import PlanBudgets
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.outcomes import Outcome, Plan, PlannedShare, PodPlan, PolicyPlan
from dra_driver.plan.preemption import Eviction, PlanPreemptor, pod_reference
from dra_driver.plan.quotas import parse_quotas, quota_uses
from dra_driver.plan.workload import PlannedPod, PodClaim, Workload
from dra_driver.publishing.slices import PCI_BUS_ID_ATTRIBUTE
from dra_driver.quota import Quota, QuotaStanding, describe
from dra_driver.structured.configshares import counted_claim
from dra_driver.usage.model import CardUse, card_uses

__all__ = ["ALLOCATION_TIMESTAMP", "Outcome", "Plan", "PlannedShare", "PodPlan", "PolicyPlan",
           "make_plan"]  # fmt: skip

# A plan never runs anything; a fixed stamp keeps its claims (and any report) reproducible.
ALLOCATION_TIMESTAMP: Final = "1970-01-01T00:00:00Z"
_PROGRESS_EVERY: Final = 100


def _sequential_share_ids() -> Callable[[], str]:
    """Return UUID-shaped share IDs 1, 2, 3, …: a plan must be the same on every run."""
    counter = itertools.count(1)
    return lambda: str(uuid.UUID(int=next(counter)))


def _class_names(claim: Mapping[str, Any]) -> set[str]:
    requests = (objects.spec(claim).get("devices") or {}).get("requests") or []
    return {
        str(entry.get("deviceClassName", ""))
        for request in requests
        for entry in [request.get("exactly") or {}, *(request.get("firstAvailable") or [])]
    }


def _is_ours(claim: Object, snapshot: Snapshot) -> bool:
    """Whether the plan should place the claim.

    A class the cluster lacks counts as ours, so that a misspelt class name is reported by
    the engine ("device class … does not exist") instead of the pod being skipped.
    """
    return uses_driver(claim, snapshot.classes, snapshot.names.driver) or not (
        _class_names(claim) <= set(snapshot.classes)
    )


def _amount(consumed: Mapping[str, Any], name: str) -> Fraction | None:
    return parse_quantity(str(consumed[name])) if name in consumed else None


def _shares(snapshot: Snapshot, entry: str, allocation: ClaimAllocation) -> list[PlannedShare]:
    # As counted: a share sized by config on a whole-only card has no consumedCapacity written.
    written = {"metadata": {"uid": allocation.uid}, "status": {"allocation": allocation.status("")}}
    counted = counted_claim(written, snapshot.names, snapshot.capacities)
    shares = []
    for result in counted["status"]["allocation"]["devices"]["results"]:
        device = snapshot.by_id[(result["driver"], result["pool"], result["device"])]
        consumed = result.get("consumedCapacity") or {}
        shares.append(
            PlannedShare(
                entry=entry,
                claim=allocation.key,
                request=str(result["request"]),
                device=device.name,
                pci_bus_id=str(device.attributes.get(PCI_BUS_ID_ATTRIBUTE, "")),
                cores=_amount(consumed, CORES),
                memory=_amount(consumed, MEMORY),
            )
        )
    return shares


def _pod_plan(
    planned: PlannedPod,
    outcome: Outcome,
    *,
    node: str | None = None,
    shares: tuple[PlannedShare, ...] = (),
    reason: str | None = None,
    fits_alone: bool | None = None,
    eviction: Eviction | None = None,
) -> PodPlan:
    victims = eviction.victims if eviction is not None else ()
    return PodPlan(
        planned.namespace,
        planned.name,
        planned.owner,
        outcome,
        node,
        shares,
        reason,
        fits_alone,
        victims,
    )


class _PolicyRun:
    """Places the pods of one workload under one policy, on its own snapshot."""

    def __init__(
        self,
        cluster: ClusterObjects,
        baseline: Snapshot,
        policy: Placement,
        *,
        refused: Mapping[str, str],
        quotas: Sequence[Quota],
        preemptor: PlanPreemptor,
    ) -> None:
        self.cluster = cluster
        self.snapshot = cluster.snapshot(baseline.names)
        self.refused = refused
        """Why the webhook would refuse a template or claim, by its document's label."""
        self.baseline = baseline
        """The cluster before the plan; never changed."""
        self.policy = Policy.uniform(policy)
        self.quotas = quotas
        self.held: dict[str, str] = {}
        """Each pod a quota holds back (``namespace/name``) -> the controller's message."""
        self._share_id = _sequential_share_ids()
        self._allocated: dict[str, tuple[str, list[PlannedShare]]] = {}
        """Claims allocated so far, by UID, with their node and shares: a claim shared by
        several pods is allocated for the first and pins the others to its node."""
        self._claims = {str(c["metadata"].get("uid")): c for c in cluster.claims}
        """Every claim of the cluster as the plan leaves it: its allocations included."""
        self.preemptor = preemptor

    def place(self, planned: PlannedPod) -> PodPlan:
        """Place one pod and count what it takes."""
        ours = [c for c in planned.claims if _is_ours(c.claim, self.snapshot)]
        if not ours:
            return _pod_plan(planned, Outcome.NOT_OURS)
        refusal = pod_refusal((c.origin for c in ours), self.refused)
        if refusal is not None:
            return _pod_plan(planned, Outcome.REFUSED, reason=refusal)
        waiting = [c for c in ours if self._uid(c) not in self._allocated]
        pinned = [
            node_selector(self._allocated[self._uid(c)][0])
            for c in ours
            if self._uid(c) in self._allocated
        ]
        claims = [c.claim for c in waiting]
        decision = place_pod(
            self.snapshot, planned.pod, claims, self.policy, pinned=pinned, share_id=self._share_id
        )
        if not isinstance(decision, Unplaceable):
            return self._allocate(planned, ours, waiting, decision)
        if decision.refused:
            return _pod_plan(planned, Outcome.REFUSED, reason=decision.reason)
        found = self.preemptor.attempt(
            self.snapshot, planned.pod, claims, self.policy, pinned=pinned, share_id=self._share_id
        )
        if found is None or isinstance(found, Blocked):
            alone = place_pod(self.baseline, planned.pod, [c.claim for c in ours], self.policy)
            reason = f"{decision.reason}; {found.reason}" if found else decision.reason
            fits = isinstance(alone, Placed)
            return _pod_plan(planned, Outcome.PENDING, reason=reason, fits_alone=fits)
        # As the controller: the victims go first; then the pod is placed, or held by a quota.
        eviction = self.preemptor.evict(found, f"{planned.namespace}/{planned.name}")
        self._release(eviction.claims)
        return self._allocate(planned, ours, waiting, found.placed, eviction)

    def _allocate(
        self,
        planned: PlannedPod,
        ours: list[PodClaim],
        waiting: list[PodClaim],
        decision: Placed,
        eviction: Eviction | None = None,
    ) -> PodPlan:
        """Count the pod's allocations and reservations, unless a quota holds it back."""
        mine = [q for q in self.quotas if q.namespace == planned.namespace]
        breached = decision_breaches(self.snapshot, mine, decision, ALLOCATION_TIMESTAMP)
        if breached:
            self.held[f"{planned.namespace}/{planned.name}"] = describe(breached)
            why = describe(breached) + (f" ({eviction.after()})" if eviction else "")
            return _pod_plan(planned, Outcome.QUOTA, reason=why, eviction=eviction)
        # Reserved for the pod, as the controller (or kube-scheduler) reserves it.
        reference = pod_reference(self.preemptor.running_pod(planned, decision.node))
        by_uid = {self._uid(c): c for c in waiting}
        for allocation in decision.claims:
            claim = by_uid[allocation.uid]
            status = {"allocation": allocation.status(ALLOCATION_TIMESTAMP)}
            self._count({**claim.claim, "status": {**status, "reservedFor": [reference]}})
            planned_shares = _shares(self.snapshot, claim.entry, allocation)
            self._allocated[allocation.uid] = (decision.node, planned_shares)
        for shared in (c for c in ours if self._uid(c) not in by_uid):
            current = self._claims[self._uid(shared)]
            reserved = [*current["status"].get("reservedFor", []), reference]
            self._count({**current, "status": {**current["status"], "reservedFor": reserved}})
        shares = tuple(share for c in ours for share in self._shares_of(c))
        outcome, reason = (
            (Outcome.PREEMPTS, eviction.reason()) if eviction else (Outcome.PLACED, None)
        )
        return _pod_plan(
            planned, outcome, node=decision.node, shares=shares, reason=reason, eviction=eviction
        )

    def _count(self, claim: Object) -> None:
        """Count ``claim`` as the plan has it now: in the snapshot, and in the cards' view."""
        self.snapshot.update_claim(claim)
        self._claims[self._uid_of(claim)] = claim

    def _release(self, uids: Sequence[str]) -> None:
        """Release the claims of evicted pods: deallocated, their room free for others."""
        for uid in uids:
            self.snapshot.remove_claim(uid)
            self._allocated.pop(uid, None)
            claim = self._claims.get(uid)
            if claim is not None:
                self._claims[uid] = {k: v for k, v in claim.items() if k != "status"}

    def outcome(self, pod: PodPlan) -> PodPlan:
        """Return ``pod`` as the plan ended: evicted, if a later pod evicted it."""
        reason = self.preemptor.evicted.get(f"{pod.namespace}/{pod.name}")
        if reason is None:
            return pod
        return dataclasses.replace(
            pod, outcome=Outcome.EVICTED, node=None, shares=(), reason=reason
        )

    @staticmethod
    def _uid_of(claim: Object) -> str:
        return str(claim["metadata"]["uid"])

    @staticmethod
    def _uid(claim: PodClaim) -> str:
        return str(claim.claim["metadata"]["uid"])

    def _shares_of(self, claim: PodClaim) -> list[PlannedShare]:
        """Return the claim's shares as this pod sees them (a shared claim names its entry)."""
        _, shares = self._allocated[self._uid(claim)]
        return [dataclasses.replace(share, entry=claim.entry) for share in shares]

    def cards(self) -> tuple[CardUse, ...]:
        """Return every card of the cluster with what is allocated on it now."""
        names = self.snapshot.names
        return tuple(card_uses(names, self.cluster.slices, self._claims.values()))

    def quota_uses(self) -> tuple[QuotaStanding, ...]:
        """Return every quota with what its namespace holds now, and whom it held back."""
        return quota_uses(self.snapshot, self.quotas, self.held)


def make_plan(
    names: DriverNames,
    cluster: ClusterObjects,
    workload: Workload,
    policies: Sequence[Placement],
    progress: Callable[[str], None] | None = None,
    *,
    preemption: bool = True,
) -> Plan:
    """Place ``workload`` on ``cluster`` under each of ``policies``.

    ``progress`` hears how far the placing is, every hundred pods and at each policy's end.
    ``preemption`` false: no pod evicts another (as the controller run without preemption).
    """
    cluster = cluster.with_classes(workload.classes)
    quotas, quota_problems = parse_quotas(cluster.quotas)
    refused = refusals(names, cluster, workload, quotas=quotas)
    baseline = cluster.snapshot(names)
    file_pods = [pod.pod for pod in workload.pods]
    results = []
    for policy in policies:
        budgets = PlanBudgets(cluster.budgets, workload.budgets, file_pods)
        preemptor = PlanPreemptor(cluster.pods, budgets, workload.pods, enabled=preemption)
        run = _PolicyRun(
            cluster, baseline, policy, refused=refused, quotas=quotas, preemptor=preemptor
        )
        pods = []
        for done, pod in enumerate(workload.pods, start=1):
            pods.append(run.place(pod))
            if progress is not None and (done % _PROGRESS_EVERY == 0 or done == len(workload.pods)):
                progress(f"{policy.value}: {done}/{len(workload.pods)} pods placed")
        pods = [run.outcome(pod) for pod in pods]
        results.append(PolicyPlan(policy, tuple(pods), run.cards(), run.quota_uses()))
    unused = unused_problems(baseline, workload, refused)
    return Plan(
        names.driver,
        cluster.source,
        workload.source,
        (*cluster.problems, *baseline.problems, *quota_problems, *unused),
        tuple(results),
        skipped=workload.skipped,
        refused_unused=len(unused),
    )
