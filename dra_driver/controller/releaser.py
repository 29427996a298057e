"""The release loop: a claim this controller allocated gives its capacity back when done.

kube-controller-manager only deallocates claims that carry kube-scheduler's finalizer
(dra-api.md §4.2), so ours are ours to release: when nothing reserves the claim any more and
no pod that may still run refers to it, or when it is being deleted. Level-triggered: every
pass reads the claim as it is now, so a crash between the two writes of a release, or between
the finalizer and the allocation of an allocation, is repaired by the next pass.
"""

from __future__ import annotations

from typing import Any, Final

from dra_driver.api import DriverNames
from dra_driver.controller.metrics import ControllerMetrics
from dra_driver.controller.view import ClusterView
from dra_driver.controller.writes import ClaimWriter
from dra_driver.k8s import objects
from dra_driver.logging import bound, get_logger

Object = dict[str, Any]
ClaimKey = tuple[str, str]

log = get_logger(__name__)

BUILTIN_FINALIZER: Final = "resource.kubernetes.io/delete-protection"


class Releaser:
    """Reconciles one claim per call."""

    def __init__(
        self,
        names: DriverNames,
        view: ClusterView,
        writer: ClaimWriter,
        metrics: ControllerMetrics,
        gate: str,
    ) -> None:
        self._names = names
        self._view = view
        self._writer = writer
        self._metrics = metrics
        self._gate = gate

    def reconcile(self, key: ClaimKey) -> None:
        """Release the claim, drop a stray finalizer, or leave it alone."""
        claim = self._view.claim(*key)
        if claim is None:
            return
        finalizers = claim["metadata"].get("finalizers") or []
        if self._names.finalizer not in finalizers:
            return
        with bound(claim="/".join(key), claim_uid=objects.uid(claim)):
            status = claim.get("status") or {}
            if status.get("allocation") and BUILTIN_FINALIZER in finalizers:
                # kube-scheduler allocated it (our gate was removed by hand after a crash of
                # ours): its allocation, its finalizer, its release. Ours only blocks deletion.
                log.info("release.foreign_allocation", action="remove our finalizer")
                self._view.assume(self._writer.remove_finalizer(claim))
                return
            if status.get("reservedFor"):
                return
            wanted = not objects.is_deleting(claim) and self._wanted(claim)
            if wanted:
                return
            if status.get("allocation"):
                released = self._writer.clear_allocation(claim)
                self._view.assume(released)
                self._metrics.releases.inc()
                log.info("release.cleared", deleting=objects.is_deleting(claim))
                claim = released
            self._view.assume(self._writer.remove_finalizer(claim))
            log.info("release.finalizer_removed")

    def _wanted(self, claim: Object) -> bool:
        """Whether a pod that may still run needs the claim kept (then it must stay).

        An allocated claim waits for its pod to be scheduled; an unallocated one with our
        finalizer (a crash between our two writes) waits for its gated pod's next pass.
        """
        allocated = bool((claim.get("status") or {}).get("allocation"))
        return any(
            not objects.is_deleting(pod)
            and (allocated or objects.has_scheduling_gate(pod, self._gate))
            for pod in self._view.pods_using(claim)
        )
