"""Capacity requests on a cluster whose API server drops them (no consumable capacity).

There the webhook refuses such a claim at creation, naming the fix, and without the webhook the
API server stores the claim without its capacity: a whole-card claim. A plan reports the first
and plans the second, as the claim would really be stored.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from dra_driver.api import DriverNames
from dra_driver.controller.engine import claim_key
from dra_driver.k8s import objects
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.workload import Workload
from dra_driver.structured.classes import device_entries
from dra_driver.webhook.capacity import limits_from_slices
from dra_driver.webhook.dropped import dropped_capacity

Object = dict[str, Any]


def dropped_problems(cluster: ClusterObjects, workload: Workload, names: DriverNames) -> list[str]:
    """Say which of the workload's claims ask for capacity this cluster's API server drops."""
    limits = limits_from_slices(cluster.slices)
    classes = {str(c["metadata"]["name"]): c for c in cluster.classes}
    claims = {
        objects.uid(c.claim) or claim_key(c.claim): c.claim for p in workload.pods for c in p.claims
    }
    claims |= {claim_key(u.claim): u.claim for u in workload.unused}
    return [
        f"claim {claim_key(claim)}: {error}"
        for claim in claims.values()
        for error in dropped_capacity(
            claim.get("spec") or {}, path="spec", names=names, classes=classes, limits=limits
        )
    ]


def as_stored(workload: Workload) -> Workload:
    """Return the workload with every claim's capacity requests removed, as they are stored."""
    pods = tuple(
        dataclasses.replace(
            pod,
            claims=tuple(
                dataclasses.replace(entry, claim=_without_capacity(entry.claim))
                for entry in pod.claims
            ),
        )
        for pod in workload.pods
    )
    unused = tuple(
        dataclasses.replace(entry, claim=_without_capacity(entry.claim))
        for entry in workload.unused
    )
    return dataclasses.replace(workload, pods=pods, unused=unused)


def _without_capacity(claim: Object) -> Object:
    stored = copy.deepcopy(claim)
    for _, _, entry in device_entries(stored.get("spec") or {}):
        entry.pop("capacity", None)  # type: ignore[attr-defined]  # our own copy
    return stored
