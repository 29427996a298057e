"""Undoing the half of a pod's allocation that an interrupted attempt left behind."""

from __future__ import annotations

from dra_driver.controller.view import ClusterView
from dra_driver.controller.writes import ClaimWriter
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.logging import get_logger
from dra_driver.structured.configshares import SCHEDULER_FINALIZER

log = get_logger(__name__)


def roll_back(view: ClusterView, writer: ClaimWriter, pod: Object, ours: list[Object]) -> bool:
    """Release claims we allocated for ``pod`` in an earlier, interrupted attempt.

    A crash or conflict between two claims' writes leaves some allocated; the rest must then
    fit on the same node. When they do not, holding the first ones would block the pod
    forever, so they are released: only unreserved ones of ours (committed or not) that no
    other pod refers to (a shared claim may be what another, ungated pod is waiting for).
    Returns whether any was released.
    """
    released = False
    uid = objects.uid(pod)
    for claim in ours:
        if any(objects.uid(other) != uid for other in view.pods_using(claim)):
            continue
        status = objects.status(claim)
        finalizers = claim["metadata"].get("finalizers") or []
        reserved = {str(r.get("uid")) for r in status.get("reservedFor") or []}
        if (
            status.get("allocation")
            and reserved <= {uid}  # reserved for this pod at most: by us, as we allocated
            and SCHEDULER_FINALIZER not in finalizers
        ):
            cleared = writer.clear_allocation(claim)
            view.assume(writer.remove_finalizer(cleared))
            log.info("allocation.rolled_back", claim=claim["metadata"]["name"])
            released = True
    return released
