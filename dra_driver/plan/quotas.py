"""GpuShareQuotas in a plan: held as the controller holds them, and counted per policy.

Before a pod's allocation is counted, the plan asks the controller's question: would its
claims take a quota of its namespace over ``hard``? Counted against the policy's snapshot,
which holds the cluster's allocated claims and every allocation planned so far. If so, the
pod would stay gated (outcome ``quota``), with the message the controller's ``QuotaExceeded``
event would carry. A quota the driver cannot read is reported and not held, as in the
controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from dra_driver.engine import Snapshot
from dra_driver.k8s.objects import Object
from dra_driver.quota import (
    Quota,
    QuotaSpecError,
    QuotaStanding,
    parse_quota,
    total_use,
)


def parse_quotas(objects: Iterable[Object]) -> tuple[list[Quota], list[str]]:
    """Return the quotas the controller would hold, and why each other one is not held."""
    quotas, problems = [], []
    for obj in objects:
        try:
            quotas.append(parse_quota(obj))
        except QuotaSpecError as exc:
            problems.append(f"{exc}; the controller would not hold it")
    return sorted(quotas, key=lambda q: (q.namespace, q.name)), problems


def quota_uses(
    snapshot: Snapshot, quotas: Sequence[Quota], held: Mapping[str, str]
) -> tuple[QuotaStanding, ...]:
    """Return each quota as the snapshot leaves it; ``held`` maps a held pod to its message."""
    uses = []
    for quota in quotas:
        used, claims = total_use(quota, snapshot.quota_uses(quota.namespace).values())
        mark = f"GpuShareQuota {quota.key}:"
        waiting = tuple(pod for pod, message in held.items() if mark in message)
        uses.append(QuotaStanding(quota, used, claims, waiting))
    return tuple(uses)
