"""The release loop: a claim this controller allocated gives its capacity back when done.

kube-controller-manager only deallocates claims that carry kube-scheduler's own finalizer
(``resource.kubernetes.io/delete-protection``), so ours are ours to release: when nothing
reserves the claim any more and no pod that may still run refers to it, or when it is being
deleted. That covers committed claims (our finalizer) and tentative ones (allocated by us, no
finalizer yet) whose pod went away before its second pass. Level-triggered: every pass reads
the claim as it is now, so a crash between the two writes of a release is repaired by the next
pass.
"""

from __future__ import annotations

from typing import Final

from dra_driver.api import DriverNames
from dra_driver.controller.metrics import ControllerMetrics
from dra_driver.controller.view import ClusterView, pods_referring
from dra_driver.controller.writes import ClaimWriter
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import Requeue
from dra_driver.logging import bound, get_logger
from dra_driver.structured.configshares import SCHEDULER_FINALIZER

ClaimKey = tuple[str, str]

log = get_logger(__name__)

_WRITING_POLL_SECONDS: Final = 0.05
"""How soon to look again at a claim the allocator is writing (a request's time)."""


def released_by_change(names: DriverNames, claim: Object) -> bool:
    """Whether a change to this claim alone may let :meth:`Releaser.reconcile` act on it.

    Claims that are neither ours nor allocated are never released; one that pods hold
    reserved waits for them, and each of them ending is an event of its own (the pod's, and
    kube-controller-manager's dropping of its reservation), which queues the claim then. Our
    finalizer beside kube-scheduler's is let go of whatever the reservations.
    """
    finalizers = claim["metadata"].get("finalizers") or []
    ours = names.finalizer in finalizers
    if ours and SCHEDULER_FINALIZER in finalizers:
        return True
    status = objects.status(claim)
    return bool(ours or status.get("allocation")) and not status.get("reservedFor")


class Releaser:
    """Reconciles one claim per call."""

    def __init__(
        self,
        names: DriverNames,
        view: ClusterView,
        writer: ClaimWriter,
        metrics: ControllerMetrics,
    ) -> None:
        self._names = names
        self._view = view
        self._writer = writer
        self._metrics = metrics

    def reconcile(self, key: ClaimKey) -> None:
        """Release the claim, drop a stray finalizer, or leave it alone."""
        claim = self._view.claim(*key)
        if claim is None:
            return
        if key in self._view.writing:
            # A leader's allocation and finalizer travel as two patches: the watch can show
            # the finalizer without the allocation, which is no stray finalizer.
            raise Requeue(_WRITING_POLL_SECONDS, "the allocator is writing the claim")
        finalizers = claim["metadata"].get("finalizers") or []
        status = objects.status(claim)
        committed = self._names.finalizer in finalizers
        if not (committed or self._tentative(claim, finalizers)):
            return
        with bound(claim="/".join(key), claim_uid=objects.uid(claim)):
            if status.get("allocation") and SCHEDULER_FINALIZER in finalizers:
                # kube-scheduler allocated it (our gate was removed by hand after a crash of
                # ours): its allocation, its finalizer, its release. Ours only blocks deletion.
                log.info("release.foreign_allocation", action="remove our finalizer")
                self._view.assume(self._writer.remove_finalizer(claim))
                return
            if status.get("reservedFor") and self._reserved(claim):
                return
            if status.get("allocation"):
                if not objects.is_deleting(claim) and self._wanted(claim):
                    return
                released = self._writer.clear_allocation(claim)
                self._view.assume(released)
                self._metrics.releases.inc()
                log.info(
                    "release.cleared", deleting=objects.is_deleting(claim), committed=committed
                )
                claim = released
            # Nothing left for the finalizer to protect: a release that stopped half-way, or a
            # tentative allocation cleared by its allocator.
            self._view.assume(self._writer.remove_finalizer(claim))
            if committed:
                log.info("release.finalizer_removed")

    def _tentative(self, claim: Object, finalizers: list[str]) -> bool:
        """Allocated by us but not committed: our driver's results, nobody's finalizer."""
        allocation = objects.status(claim).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        return SCHEDULER_FINALIZER not in finalizers and any(
            result.get("driver") == self._names.driver for result in results
        )

    def _reserved(self, claim: Object) -> bool:
        """Whether a pod the claim is reserved for may still run.

        kube-controller-manager drops the reservations of pods that are gone or finished, but
        the controller reserves a claim when it allocates it, before the pod is bound: when
        such a pod is deleted this needs no wait for that. A pod the cache does not show is
        read from the API server, which has the last word before a release.
        """
        namespace = claim["metadata"]["namespace"]
        for reference in objects.status(claim).get("reservedFor") or []:
            if reference.get("resource") != "pods":
                return True  # not ours to judge
            name, uid = str(reference.get("name")), str(reference.get("uid"))
            pod = self._view.pods.get(namespace, name)
            if pod is None or objects.uid(pod) != uid:
                pod = self._writer.read_pod(namespace, name)
            if pod is not None and objects.uid(pod) == uid and not objects.is_terminal(pod):
                return True
        return False

    def _wanted(self, claim: Object) -> bool:
        """Whether a pod that may still run refers to the allocated claim (then it stays).

        The pod watch may lag the claim watch: another replica, or this one before a restart,
        may just have allocated the claim for a pod this cache does not show yet. Taking the
        claim from under that pod would let it start on a claim someone else then gets, so
        before a release the API server has the last word.
        """
        if any(not objects.is_deleting(pod) for pod in self._view.pods_using(claim)):
            return True
        namespace = claim["metadata"]["namespace"]
        owner = objects.controller_reference(claim)
        if owner is not None and owner.get("kind") == "Pod":
            pod = self._writer.read_pod(namespace, str(owner.get("name")))
            # A generated claim belongs to its owner alone, named in the pod's status or not.
            return (
                pod is not None
                and objects.uid(pod) == owner.get("uid")
                and not objects.is_terminal(pod)
                and not objects.is_deleting(pod)
            )
        return any(
            not objects.is_deleting(pod)
            for pod in pods_referring(self._writer.list_pods(namespace), claim)
        )
