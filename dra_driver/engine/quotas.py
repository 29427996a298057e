"""Whether a placement would take a GpuShareQuota over ``hard``: the controller's and plan's check.

Counted against the snapshot, which holds every allocated claim (and, in the controller, its
own writes not yet echoed by the watch; in a plan, every allocation planned so far), so two
decisions in a row never both take the last room.
"""

from __future__ import annotations

from collections.abc import Iterable

from dra_driver.engine.place import ClaimAllocation, Placed
from dra_driver.engine.snapshot import Snapshot
from dra_driver.k8s.objects import Object
from dra_driver.quota import Breach, Quota, breaches, total_use


def decision_breaches(
    snapshot: Snapshot, quotas: Iterable[Quota], decision: Placed, timestamp: str
) -> list[Breach]:
    """Return every resource of ``quotas`` that writing ``decision`` would take over ``hard``."""
    asked = [
        use
        for allocation in decision.claims
        if (use := snapshot.quota_use(_as_claim(allocation, timestamp))) is not None
    ]
    found: list[Breach] = []
    for quota in quotas:
        wanted, _ = total_use(quota, asked)
        found += breaches(quota, snapshot.quota_used(quota), wanted)
    return found


def _as_claim(allocation: ClaimAllocation, timestamp: str) -> Object:
    """Return the claim ``allocation`` describes as it would be once written (for counting)."""
    namespace, _, name = allocation.key.partition("/")
    metadata = {"namespace": namespace, "name": name, "uid": allocation.uid}
    return {"metadata": metadata, "status": {"allocation": allocation.status(timestamp)}}
