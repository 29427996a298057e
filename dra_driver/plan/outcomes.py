"""What a plan reports: each pod's fate and each card's use, per placement policy."""

from __future__ import annotations

import dataclasses
import enum
from fractions import Fraction

from dra_driver.api import Placement
from dra_driver.quota import QuotaStanding
from dra_driver.usage.model import CardUse


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
    PREEMPTS = "preempts"
    """Placed once the offline pods in ``victims`` are evicted: it fits nowhere else."""
    EVICTED = "evicted"
    """Placed, then evicted for a later online pod (the reason names it)."""


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
    victims: tuple[str, ...] = ()
    """The pods (``namespace/name``) evicted to make room for it."""


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
