"""Preemption: which offline pods an online pod that fits nowhere would have evicted, if any.

Pure, like :func:`~dra_driver.engine.place.place_pod`: the snapshot is changed only inside
:meth:`Snapshot.without` blocks, which restore it. The rules, each a promise users rely on:

- only for a pod whose every request is online, and whose ``preemptionPolicy`` is not
  ``Never``; only offline pods whose every share of ours is ``preemptible`` are victims, and
  only while running on a node (bound, not being deleted), with claims that are theirs alone
  (a shared claim outlives the eviction), and a pod priority no higher than the online pod's;
- on one node, the smallest set of victims after which the pod fits; among nodes, the fewest
  victims, then the lowest pod priorities, then the youngest pods;
- never more victims than needed: no victim of the chosen set can be spared;
- never against a PodDisruptionBudget: a set that would take a budget below what it allows is
  skipped, and when every set that fits is, the answer names the budgets.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

from dra_driver.api import Priority
from dra_driver.api.fields import CORES
from dra_driver.engine import scoring
from dra_driver.engine.nomination import PodRef
from dra_driver.engine.place import Placed, Unplaceable, node_selector, place_pod
from dra_driver.engine.requests import ClaimRefused, parse_claim
from dra_driver.engine.scan import NodeFit
from dra_driver.engine.snapshot import Snapshot
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.scheduling import label_selector_matches
from dra_driver.k8s.timestamps import epoch_seconds

MAX_CHECKS: Final = 256
"""Placement checks one question may make (each one a placement on one node): at most half to
find the nodes where evicting every candidate would make room, most free room first, the rest
to find the smallest set on them; past it, the search spares what it can, one by one, from
every candidate of the first node that would do."""
DEFAULT_GRACE_SECONDS: Final = 30
"""What a pod without ``terminationGracePeriodSeconds`` gets."""


@dataclasses.dataclass(frozen=True)
class Victim:
    """A running offline pod that could be evicted, and the claims its eviction frees."""

    pod: PodRef
    node: str
    priority: int
    created: float
    grace: int
    labels: Mapping[str, str]
    claims: tuple[str, ...]
    """UIDs of its claims of this driver (allocated, reserved for it alone)."""

    @property
    def preference(self) -> tuple[int, float, str]:
        """Sort key: who goes first; lower pod priority, then younger, then by name."""
        return self.priority, -self.created, self.pod.key


@dataclasses.dataclass(frozen=True)
class DisruptionBudget:
    """A PodDisruptionBudget as the Eviction API applies it: how many pods may go now."""

    namespace: str
    name: str
    selector: Object | None
    allowed: int

    def covers(self, victim: Victim) -> bool:
        """Whether the budget counts ``victim`` (same namespace, selected by its labels)."""
        return victim.pod.namespace == self.namespace and label_selector_matches(
            self.selector, victim.labels
        )


@dataclasses.dataclass(frozen=True)
class Preemption:
    """Evict ``victims`` on ``node``; then ``placed`` is where the pod goes (the room held)."""

    node: str
    victims: tuple[Victim, ...]
    placed: Placed


@dataclasses.dataclass(frozen=True)
class Blocked:
    """The pod would fit after evictions, but every such set breaks a disruption budget."""

    reason: str


def disruption_budget(pdb: Object) -> DisruptionBudget:
    """Read a ``policy/v1`` PodDisruptionBudget; without status it allows nothing yet."""
    allowed = objects.status(pdb).get("disruptionsAllowed")
    return DisruptionBudget(
        namespace=objects.namespace(pdb),
        name=objects.name(pdb),
        selector=objects.spec(pdb).get("selector"),
        allowed=allowed if isinstance(allowed, int) else 0,
    )


def wants_preemption(snapshot: Snapshot, pod: Object, claims: Sequence[Object]) -> bool:
    """Whether ``pod`` may have others evicted: every request online, preemption not off."""
    if objects.spec(pod).get("preemptionPolicy") == "Never" or not claims:
        return False
    try:
        specs = [parse_claim(claim, snapshot.names, snapshot.classes) for claim in claims]
    except (ClaimRefused, TypeError, ValueError, KeyError, AttributeError):
        return False
    return all(
        alternative.config.priority is Priority.ONLINE
        for spec in specs
        for request in spec.requests
        for alternative in request.alternatives
    )


def victims(
    snapshot: Snapshot, pod: Object, pods: Callable[[str, str], Object | None]
) -> dict[str, list[Victim]]:
    """Return, per node, the pods that may be evicted for ``pod``, in :attr:`preference` order.

    ``pods`` looks a pod up by namespace and name.
    """
    ceiling = _pod_priority(pod)
    by_pod: dict[tuple[str, str], list[str]] = {}
    for uid, claim in snapshot.preemptible.items():
        reserved = objects.status(claim).get("reservedFor") or []
        if len(reserved) == 1 and reserved[0].get("resource") == "pods":
            key = (objects.namespace(claim), str(reserved[0].get("name")))
            by_pod.setdefault(key, []).append(uid)
    found: dict[str, list[Victim]] = {}
    for (namespace, name), claims in by_pod.items():
        candidate = pods(namespace, name)
        if candidate is None or not _evictable(snapshot, candidate, claims, ceiling):
            continue
        victim = _victim(candidate, claims)
        found.setdefault(victim.node, []).append(victim)
    for listed in found.values():
        listed.sort(key=lambda v: v.preference)
    return found


def preempt(
    snapshot: Snapshot,
    pod: Mapping[str, Any],
    claims: Sequence[Mapping[str, Any]],
    policy: scoring.Policy,
    *,
    candidates: Mapping[str, Sequence[Victim]],
    budgets: Sequence[DisruptionBudget] = (),
    pinned: Sequence[Object] = (),
    node_fit: NodeFit | None = None,
    share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    max_checks: int = MAX_CHECKS,
) -> Preemption | Blocked | None:
    """Choose the victims whose eviction lets ``pod`` fit; ``None`` when none would do.

    Arguments as for :func:`place_pod`; ``candidates`` are :func:`victims`' answer.
    """
    search = _Search(snapshot, pod, claims, policy, pinned, node_fit, share_id, max_checks)
    feasible = []
    # The nodes with the most free room first: they need the fewest evictions. Half the checks
    # at most go to finding nodes where evicting everyone would do, so some are left to find
    # the smallest set on them.
    for node in sorted(candidates, key=lambda n: (-_free_cores(snapshot, n), n)):
        if search.checks_left <= max_checks // 2:
            break
        if search.fits(node, candidates[node]) is not None:
            feasible.append(node)
    best: Preemption | None = None
    for size in range(1, max((len(candidates[n]) for n in feasible), default=0) + 1):
        for node in feasible:
            found = search.smallest(node, candidates[node], size, budgets)
            if found is not None and (best is None or _rank(found) < _rank(best)):
                best = found
        if best is not None or search.exhausted:
            break
    if best is None and search.exhausted:
        best = search.spare_from_all(feasible, candidates, budgets)
    if best is not None:
        return best
    if search.blocked:
        names = ", ".join(sorted(search.blocked))
        return Blocked(
            f"would fit after evicting offline pods, but PodDisruptionBudget {names} "
            "allows no more disruptions"
        )
    return None


@dataclasses.dataclass
class _Search:
    """Placement checks with victims removed, counted against a budget."""

    snapshot: Snapshot
    pod: Mapping[str, Any]
    claims: Sequence[Mapping[str, Any]]
    policy: scoring.Policy
    pinned: Sequence[Object]
    node_fit: NodeFit | None
    share_id: Callable[[], str]
    checks_left: int
    blocked: set[str] = dataclasses.field(default_factory=set)
    """Budgets that ruled out a set that fits."""

    @property
    def exhausted(self) -> bool:
        """Whether the checks are spent; :meth:`spare_from_all` still runs past it."""
        return self.checks_left <= 0

    def fits(self, node: str, gone: Iterable[Victim]) -> Placed | None:
        """Return where the pod goes on ``node`` once ``gone`` are evicted, if it fits."""
        self.checks_left -= 1
        uids = [uid for victim in gone for uid in victim.claims]
        with self.snapshot.without(uids):
            decision = place_pod(
                self.snapshot,
                self.pod,
                self.claims,
                self.policy,
                pinned=[*self.pinned, node_selector(node)],
                node_fit=self.node_fit,
                share_id=self.share_id,
            )
        return decision if not isinstance(decision, Unplaceable) else None

    def smallest(
        self,
        node: str,
        candidates: Sequence[Victim],
        size: int,
        budgets: Sequence[DisruptionBudget],
    ) -> Preemption | None:
        """Return the most preferred set of ``size`` victims on ``node`` that lets the pod fit."""
        for chosen in itertools.combinations(candidates, size):
            if self.exhausted:
                return None
            placed = self.fits(node, chosen)
            if placed is None:
                continue
            over = _over_budget(chosen, budgets)
            if over:
                self.blocked.update(over)
                continue
            return Preemption(node, chosen, placed)
        return None

    def spare_from_all(
        self,
        feasible: Sequence[str],
        candidates: Mapping[str, Sequence[Victim]],
        budgets: Sequence[DisruptionBudget],
    ) -> Preemption | None:
        """Past the check budget: on the first node that fits, spare victims one by one.

        Starting from every candidate and keeping each one (most preferred to stay first) whose
        return still lets the pod fit leaves a set none of whose victims could be spared.
        """
        for node in feasible:
            chosen = list(candidates[node])
            for victim in reversed(candidates[node]):
                rest = [v for v in chosen if v is not victim]
                if self.fits(node, rest) is not None:
                    chosen = rest
            over = _over_budget(chosen, budgets)
            if over:
                self.blocked.update(over)
                continue
            placed = self.fits(node, chosen)
            if placed is not None:
                return Preemption(node, tuple(chosen), placed)
        return None


def _free_cores(snapshot: Snapshot, node: str) -> Fraction:
    """Return the cores free on ``node``'s cards, counted whole (a cheap measure of its room)."""
    total = Fraction(0)
    for device in snapshot.devices.get(node, ()):
        free = snapshot.load.free.get(device.id)
        total += (free or {}).get(CORES, Fraction(0))
    return total


def _rank(found: Preemption) -> tuple[int, int, int, float, str]:
    priorities = [v.priority for v in found.victims]
    youth = sum(v.created for v in found.victims)
    return len(found.victims), max(priorities), sum(priorities), -youth, found.node


def _over_budget(chosen: Sequence[Victim], budgets: Sequence[DisruptionBudget]) -> list[str]:
    """Name the budgets evicting ``chosen`` together would take below what they allow."""
    return [
        f"{b.namespace}/{b.name}"
        for b in budgets
        if sum(b.covers(victim) for victim in chosen) > b.allowed
    ]


def _evictable(snapshot: Snapshot, pod: Object, claims: list[str], ceiling: int) -> bool:
    """Whether ``pod`` runs, and every claim of ours it has is among ``claims``."""
    if objects.is_deleting(pod) or not objects.spec(pod).get("nodeName"):
        return False
    if _pod_priority(pod) > ceiling:
        return False
    namespace = objects.namespace(pod)
    for name in objects.pod_claim_names(pod).values():
        uid = snapshot.counted_names.get((namespace, name or ""))
        if uid is not None and uid not in claims and snapshot.marks.get(uid):
            return False  # an online or exempt share of ours rides along
    return True


def _victim(pod: Object, claims: list[str]) -> Victim:
    metadata = objects.metadata(pod)
    grace = objects.spec(pod).get("terminationGracePeriodSeconds")
    created = metadata.get("creationTimestamp")
    return Victim(
        pod=PodRef(objects.namespace(pod), objects.name(pod), objects.uid(pod)),
        node=str(objects.spec(pod).get("nodeName")),
        priority=_pod_priority(pod),
        created=epoch_seconds(created) if isinstance(created, str) else 0.0,
        grace=grace if isinstance(grace, int) and grace >= 0 else DEFAULT_GRACE_SECONDS,
        labels=metadata.get("labels") or {},
        claims=tuple(sorted(claims)),
    )


def _pod_priority(pod: Mapping[str, Any]) -> int:
    priority = objects.spec(pod).get("priority")
    return priority if isinstance(priority, int) else 0
