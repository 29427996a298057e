"""Place a workload's pods one after another with the allocation engine, once per policy.

Each policy starts from its own fresh snapshot of the cluster. Pods are placed in file order,
as if created in that order and allocated one at a time as the controller does, and every
allocation is counted before the next pod, so later pods see the capacity taken. A claim
shared by several pods is allocated for the first of them; the others must go to its node.
A pod whose allocation would take a GpuShareQuota of its namespace over ``hard`` is held
back, as the controller holds it (:mod:`dra_driver.plan.quotas`).
"""

from __future__ import annotations

import dataclasses
import enum
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
from dra_driver.engine.quotas import decision_breaches
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import parse_quantity
from dra_driver.plan.admission import pod_refusal, refusals
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.quotas import parse_quotas, quota_uses
from dra_driver.plan.workload import PlannedPod, PodClaim, Workload
from dra_driver.publishing.slices import PCI_BUS_ID_ATTRIBUTE
from dra_driver.quota import Quota, QuotaStanding, describe
from dra_driver.structured.configshares import counted_claim
from dra_driver.usage.model import CardUse, card_uses

# A plan never runs anything; a fixed stamp keeps its claims (and any report) reproducible.
ALLOCATION_TIMESTAMP: Final = "1970-01-01T00:00:00Z"
_PROGRESS_EVERY: Final = 100


class Outcome(enum.StrEnum):
    """What became of one pod under one policy."""

    PLACED = "placed"
    PENDING = "pending"
    """No node has room now; it would wait (and run once capacity is freed or added)."""
    REFUSED = "refused"
    """A claim can never be allocated as written; the reason names the field to change."""
    QUOTA = "quota"
    """A card has room, but a GpuShareQuota of its namespace has not: it would wait, gated,
    until claims of the namespace are released (the reason is the controller's message)."""
    NOT_OURS = "notOurs"
    """The pod uses no DeviceClass of this driver."""


@dataclasses.dataclass(frozen=True)
class PlannedShare:
    """One device allocated to one request of a pod's claim."""

    entry: str
    """The pod's ``spec.resourceClaims`` entry."""
    claim: str
    """``namespace/name`` of the claim."""
    request: str
    device: str
    pci_bus_id: str
    cores: Fraction | None
    """Consumed capacity; ``None`` when the device is held whole, without a share."""
    memory: Fraction | None


@dataclasses.dataclass(frozen=True)
class PodPlan:
    """One pod's fate under one policy."""

    namespace: str
    name: str
    owner: str
    outcome: Outcome
    node: str | None = None
    shares: tuple[PlannedShare, ...] = ()
    reason: str | None = None
    fits_alone: bool | None = None
    """For a pending pod: whether it would fit on the cluster as it was before the plan, so
    that only the pods planned before it are in its way (``False``: more or bigger cards are
    needed, or existing claims must go)."""


@dataclasses.dataclass(frozen=True)
class PolicyPlan:
    """Every pod and every card under one policy."""

    policy: Placement
    pods: tuple[PodPlan, ...]
    cards: tuple[CardUse, ...]
    quotas: tuple[QuotaStanding, ...] = ()

    def count(self, outcome: Outcome) -> int:
        """Return how many pods ended with ``outcome``."""
        return sum(1 for pod in self.pods if pod.outcome is outcome)

    @property
    def ours(self) -> int:
        """Return how many pods use this driver."""
        return len(self.pods) - self.count(Outcome.NOT_OURS)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The whole report: one :class:`PolicyPlan` per policy, in the order asked for."""

    driver: str
    cluster: str
    workload: str
    problems: tuple[str, ...]
    """What the engine could not use in the cluster's objects (malformed slices, claims), and
    the workload's templates and claims no pod uses that a pod could not use either."""
    policies: tuple[PolicyPlan, ...]
    skipped: tuple[str, ...] = ()
    """Documents of the file of kinds a plan does not place (ConfigMaps, Services …)."""
    refused_unused: int = 0
    """How many templates and claims no pod uses would be refused."""

    @property
    def refused(self) -> bool:
        """Whether anything of the file would be refused: the plan's non-zero exit."""
        return self.refused_unused > 0 or any(p.count(Outcome.REFUSED) for p in self.policies)


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
) -> PodPlan:
    return PodPlan(
        planned.namespace, planned.name, planned.owner, outcome, node, shares, reason, fits_alone
    )


class _PolicyRun:
    """Places the pods of one workload under one policy, on its own snapshot."""

    def __init__(
        self,
        cluster: ClusterObjects,
        baseline: Snapshot,
        policy: Placement,
        refused: Mapping[str, str],
        quotas: Sequence[Quota] = (),
    ) -> None:
        self.cluster = cluster
        self.snapshot = cluster.snapshot(baseline.names)
        self.refused = refused
        """Why the webhook would refuse a template or claim, by its document's label."""
        self.baseline = baseline
        """The cluster before the plan; never changed."""
        self.policy = policy
        self.quotas = quotas
        self.held: dict[str, str] = {}
        """Each pod a quota holds back (``namespace/name``) -> the controller's message."""
        self._share_id = _sequential_share_ids()
        self._allocated: dict[str, tuple[str, list[PlannedShare]]] = {}
        """Claims allocated so far, by UID, with their node and shares: a claim shared by
        several pods is allocated for the first and pins the others to its node."""
        self._claims = {str(c["metadata"].get("uid")): c for c in cluster.claims}
        """Every claim of the cluster as the plan leaves it: its allocations included."""

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
        policy = Policy.uniform(self.policy)
        decision = place_pod(
            self.snapshot,
            planned.pod,
            [c.claim for c in waiting],
            policy,
            pinned=pinned,
            share_id=self._share_id,
        )
        if isinstance(decision, Unplaceable):
            if decision.refused:
                return _pod_plan(planned, Outcome.REFUSED, reason=decision.reason)
            alone = place_pod(self.baseline, planned.pod, [c.claim for c in ours], policy)
            fits_alone = isinstance(alone, Placed)
            return _pod_plan(
                planned, Outcome.PENDING, reason=decision.reason, fits_alone=fits_alone
            )
        mine = [q for q in self.quotas if q.namespace == planned.namespace]
        breached = decision_breaches(self.snapshot, mine, decision, ALLOCATION_TIMESTAMP)
        if breached:
            self.held[f"{planned.namespace}/{planned.name}"] = describe(breached)
            return _pod_plan(planned, Outcome.QUOTA, reason=describe(breached))
        by_uid = {self._uid(c): c for c in waiting}
        for allocation in decision.claims:
            claim = by_uid[allocation.uid]
            status = {"allocation": allocation.status(ALLOCATION_TIMESTAMP)}
            allocated = {**claim.claim, "status": status}
            self.snapshot.update_claim(allocated)
            self._claims[allocation.uid] = allocated
            self._allocated[allocation.uid] = (
                decision.node,
                _shares(self.snapshot, claim.entry, allocation),
            )
        shares = tuple(share for c in ours for share in self._shares_of(c))
        return _pod_plan(planned, Outcome.PLACED, node=decision.node, shares=shares)

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
) -> Plan:
    """Place ``workload`` on ``cluster`` under each of ``policies``.

    ``progress`` hears how far the placing is, every hundred pods and at each policy's end.
    """
    cluster = cluster.with_classes(workload.classes)
    quotas, quota_problems = parse_quotas(cluster.quotas)
    refused = refusals(names, cluster, workload, quotas=quotas)
    baseline = cluster.snapshot(names)
    results = []
    for policy in policies:
        run = _PolicyRun(cluster, baseline, policy, refused, quotas)
        pods = []
        for done, pod in enumerate(workload.pods, start=1):
            pods.append(run.place(pod))
            if progress is not None and (done % _PROGRESS_EVERY == 0 or done == len(workload.pods)):
                progress(f"{policy.value}: {done}/{len(workload.pods)} pods placed")
        results.append(PolicyPlan(policy, tuple(pods), run.cards(), run.quota_uses()))
    unused = _unused_problems(baseline, workload, refused)
    return Plan(
        names.driver,
        cluster.source,
        workload.source,
        (*cluster.problems, *baseline.problems, *quota_problems, *unused),
        tuple(results),
        skipped=workload.skipped,
        refused_unused=len(unused),
    )


def _unused_problems(
    baseline: Snapshot, workload: Workload, refused: Mapping[str, str]
) -> list[str]:
    """Say which templates and claims no pod uses would be refused if a pod did.

    A mistake there shows nowhere else in the plan, and would only surface at ``kubectl apply``
    (the webhook) or, for the first pod that uses it, as a refused placement.
    """
    problems = []
    for unused in workload.unused:
        if unused.origin in refused:
            problems.append(
                f"{unused.origin} is used by no pod of the file, and would be refused: "
                f"{refused[unused.origin]}"
            )
            continue
        metadata = unused.claim["metadata"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "unused", "namespace": metadata["namespace"]},
            "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": metadata["name"]}]},
        }
        decision = place_pod(baseline, pod, [unused.claim], Policy.uniform(Placement.BINPACK))
        if isinstance(decision, Unplaceable) and decision.refused:
            problems.append(
                f"{unused.origin} is used by no pod of the file; a pod using it would be "
                f"refused: {decision.reason}"
            )
    return problems
