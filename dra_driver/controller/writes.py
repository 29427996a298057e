"""Every write the controller makes, each guarded against a stale decision, and its live reads.

Most writes send the ``resourceVersion`` they were computed from, so a stale decision fails
with a conflict instead of overwriting someone else's change; the caller re-reads and decides
again. The order of a claim's writes makes every crash point safe:

- allocate, without leader election: ``status.allocation`` first (tentative), then, once
  checked against what others wrote meanwhile, our finalizer (committed), then the pod's
  gate. A crash before the finalizer leaves a tentative claim whose pod is still gated: no
  pod can run on it, and the next pass checks and commits it, or clears it;
- allocate, as the leader: ``status.allocation`` and our finalizer together, two patches
  that cannot conflict with each other (:meth:`ClaimWriter.allocate_protected`), then, once
  checked, the gate. A crash before the gate leaves a gated pod, which the next leader checks
  again before it ungates it;
- release: clear ``status.allocation`` first, then the finalizer — a finalizer without an
  allocation is harmless and removed on the next pass.

What marks an allocation checked is in :mod:`dra_driver.controller.commits`.

Every write is a patch of the fields it means to change, never the claim sent back whole: the
API server keeps a config's opaque ``parameters`` as the bytes it was given and refuses an
update whose spec bytes differ ("field is immutable"), and this client would re-serialize
them. Merge and JSON patches leave untouched fields as stored (a strategic merge patch would
not: it re-encodes the whole object). docs/api-writes.md lists every write of every component.

A write can fail after the API server stored it: a timeout, a connection that broke while the
answer was on its way, a 500. Counting such a write as not done could give its capacity away
twice, or leave a pod gated for ever; so after an error of unknown outcome the object is read
back, and if it already shows what the write asked for, the write counts as done.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
from collections.abc import Callable
from typing import Any, Final

from kubernetes import client

from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import (
    ApiError,
    InvalidError,
    NotFoundError,
    RetryableError,
)
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.objects import Object
from dra_driver.logging import get_logger

log = get_logger(__name__)

_PATCH_RETRIES: Final = 5


def _devices(allocation: Object | None) -> list[tuple[object, ...]]:
    """Return what identifies an allocation: its results' devices and shares, and its time."""
    if not allocation:
        return []
    results = (allocation.get("devices") or {}).get("results") or []
    stamp = allocation.get("allocationTimestamp")
    return [
        (stamp, r.get("request"), r.get("driver"), r.get("pool"), r.get("device"), r.get("shareID"))
        for r in results
    ]


def allocation_key(allocation: Object | None) -> str:
    """Identify an allocation by its devices, shares and time: a new one never matches."""
    return repr(_devices(allocation))


def _allocated(allocation: Object, reserved_for: list[Object]) -> Object:
    """Return the status fields of a new allocation, reserved for the pods it is made for."""
    return {"allocation": allocation, **({"reservedFor": reserved_for} if reserved_for else {})}


def _allocation(claim: Object) -> Object | None:
    allocation: Object | None = objects.status(claim).get("allocation")
    return allocation


class ClaimWriter:
    """Writes claims and pods through one API client."""

    def __init__(self, api_client: client.ApiClient, finalizer: str) -> None:
        self._resource = client.ResourceV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._finalizer = finalizer
        # One request beside the caller's: the finalizer travels with the allocation.
        self._beside = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="commit")

    def add_finalizer(self, claim: Object) -> Object:
        """Return the claim with our finalizer, adding it if missing.

        Guarded by the claim's resourceVersion: a claim changed since the caller's decision
        (another replica cleared or replaced the allocation it checked) gets a conflict.
        """
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if self._finalizer in finalizers:
            return claim
        return self._set_finalizers(claim, [*finalizers, self._finalizer], present=True)

    def remove_finalizer(self, claim: Object) -> Object:
        """Return the claim without our finalizer, removing it if present.

        Guarded by the claim's resourceVersion, like :meth:`add_finalizer`: a claim allocated
        again since the caller looked keeps the finalizer that protects that allocation.
        """
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if self._finalizer not in finalizers:
            return claim
        return self._set_finalizers(
            claim, [f for f in finalizers if f != self._finalizer], present=False
        )

    def allocate_protected(
        self, claim: Object, allocation: Object, reserved_for: list[Object]
    ) -> Object:
        """Set ``status.allocation`` and our finalizer at once: two patches in flight together.

        For a leader holding its Lease firmly (see :mod:`dra_driver.controller.commits`): here
        the finalizer protects the claim from deletion and marks it ours, not checked. Neither
        patch carries a resourceVersion, so they cannot conflict with each other; both name the
        claim's UID, which is immutable, so neither lands on a claim created again under the
        name; and an allocation is immutable once set, so the status patch cannot replace
        someone else's. Returns the claim as stored after both, or raises the first error
        once both are done.
        """
        run = contextvars.copy_context().run
        protected = self._beside.submit(run, self._append_finalizer, claim)
        try:
            allocated = self._merge_allocation(claim, allocation, reserved_for)
        finally:
            # Waited for either way: the next decision must not start with a write in flight.
            concurrent.futures.wait([protected])
        stored = protected.result()
        # Each answer shows the claim after its own patch; the later one shows both.
        return max(allocated, stored, key=objects.resource_version_number)

    def _append_finalizer(self, claim: Object) -> Object:
        """Add our finalizer by a JSON patch that no status write conflicts with.

        It travels beside the status patch, so it carries no resourceVersion; it appends to
        the finalizers as stored (or creates the list where the claim has none), so a
        finalizer someone else added meanwhile is kept. When the list appeared or vanished
        since the claim was read, the claim is read again and the patch made anew.
        """
        current: Object | None = claim
        attempts = 0
        while True:
            attempts += 1
            if current is None or objects.uid(current) != objects.uid(claim):
                raise NotFoundError(f"claim {'/'.join(object_key(claim))} is gone")
            finalizers = current["metadata"].get("finalizers")
            if self._finalizer in (finalizers or []):
                return current
            operations = [
                {"op": "test", "path": "/metadata/uid", "value": objects.uid(claim)},
                *(
                    [{"op": "add", "path": "/metadata/finalizers/-", "value": self._finalizer}]
                    if finalizers
                    else [
                        # null also matches a list that is absent
                        {"op": "test", "path": "/metadata/finalizers", "value": None},
                        {"op": "add", "path": "/metadata/finalizers", "value": [self._finalizer]},
                    ]
                ),
            ]
            try:
                return self._patch(
                    current,
                    self._resource.patch_namespaced_resource_claim,
                    operations,
                    raw.JSON_PATCH,
                    lambda c: self._finalizer in (c["metadata"].get("finalizers") or []),
                )
            except InvalidError:  # a test failed: the finalizers (or the object) changed
                if attempts == _PATCH_RETRIES:
                    raise
                current = self.read_claim(claim)

    def _merge_allocation(
        self, claim: Object, allocation: Object, reserved_for: list[Object]
    ) -> Object:
        """Set allocation and reservation by a merge patch of the status, without a version.

        It names the claim's UID, which is immutable, so it cannot land on a claim created
        again under the name.
        """
        wanted = _devices(allocation)
        return self._patch(
            claim,
            self._resource.patch_namespaced_resource_claim_status,
            {
                "metadata": {"uid": objects.uid(claim)},
                "status": _allocated(allocation, reserved_for),
            },
            raw.MERGE_PATCH,
            lambda current: _devices(_allocation(current)) == wanted,
        )

    def _set_finalizers(self, claim: Object, finalizers: list[str], *, present: bool) -> Object:
        """Merge-patch ``metadata.finalizers`` at the claim's resourceVersion."""
        metadata = {
            "resourceVersion": claim["metadata"]["resourceVersion"],
            "finalizers": finalizers or None,  # null removes the list
        }
        return self._patch(
            claim,
            self._resource.patch_namespaced_resource_claim,
            {"metadata": metadata},
            raw.MERGE_PATCH,
            lambda current: (
                (self._finalizer in (current["metadata"].get("finalizers") or [])) == present
            ),
        )

    def _patch(
        self,
        claim: Object,
        patch_call: Callable[..., Any],
        body: Object | list[Object],
        content_type: str,
        landed: Callable[[Object], bool],
    ) -> Object:
        """Send one patch of the claim, confirmed after an error of unknown outcome."""
        namespace, name = object_key(claim)
        return self._confirmed(
            claim,
            lambda: raw.call(patch_call, name, namespace, body, _content_type=content_type),
            landed,
        )

    def _confirmed(
        self, claim: Object, write: Callable[[], Object], landed: Callable[[Object], bool]
    ) -> Object:
        """Run ``write``; after an error of unknown outcome, read the claim back.

        Returns what the API server stored, or the claim read back if it shows the write took
        effect (``landed``); otherwise the write's error is raised. The claim read back must be
        the same object (UID): a claim deleted and created again is not ours to speak for.
        """
        try:
            return write()
        except RetryableError as exc:
            current = self.read_claim(claim)
            if (
                current is not None
                and objects.uid(current) == objects.uid(claim)
                and landed(current)
            ):
                log.info("write.confirmed", claim="/".join(object_key(claim)), error=str(exc))
                return current
            raise

    def read_claim(self, claim: Object) -> Object | None:
        """Read the claim afresh from the API server; ``None`` if it is gone or unreadable."""
        namespace, name = object_key(claim)
        try:
            return raw.call(self._resource.read_namespaced_resource_claim, name, namespace)
        except ApiError:
            return None

    def read_pod(self, namespace: str, name: str) -> Object | None:
        """Read a pod afresh from the API server; ``None`` if it does not exist."""
        try:
            return raw.call(self._core.read_namespaced_pod, name, namespace)
        except NotFoundError:
            return None

    def list_pods(self, namespace: str) -> list[Object]:
        """List the namespace's pods afresh from the API server."""
        items: list[Object] = raw.call(self._core.list_namespaced_pod, namespace).get("items") or []
        return items

    def write_allocation(
        self, claim: Object, allocation: Object, reserved_for: list[Object]
    ) -> Object:
        """Set ``status.allocation`` and reserve the claim for ``reserved_for``.

        A merge patch of the status at the claim's resourceVersion. An allocation is
        immutable once set: only a cleared claim takes one.
        """
        wanted = _devices(allocation)
        return self._patch_status(
            claim,
            _allocated(allocation, reserved_for),
            lambda current: _devices(_allocation(current)) == wanted,
        )

    def clear_allocation(self, claim: Object) -> Object:
        """Clear ``status.allocation`` and the device statuses that belong to it."""
        cleared = _devices(_allocation(claim))
        # Landed once the allocation we cleared is gone, whatever came after it.
        return self._patch_status(
            claim,
            {"allocation": None, "devices": None, "reservedFor": None},
            lambda current: _devices(_allocation(current)) != cleared,
        )

    def _patch_status(
        self, claim: Object, status: Object, landed: Callable[[Object], bool]
    ) -> Object:
        """Merge-patch ``status`` (null removes a field) at the claim's resourceVersion."""
        version = claim["metadata"]["resourceVersion"]
        return self._patch(
            claim,
            self._resource.patch_namespaced_resource_claim_status,
            {"metadata": {"resourceVersion": version}, "status": status},
            raw.MERGE_PATCH,
            landed,
        )

    def remove_gate(self, pod: Object, gate: str) -> bool:
        """Remove ``gate`` from the pod; return whether this call removed it.

        A JSON patch that holds only while the pod is the same object (UID) with the gates as
        read: status updates by others (kube-scheduler marks a gated pod) do not conflict with
        it, as a whole-object update would. ``pod`` may be a stale cached copy; when the gates
        changed meanwhile the pod is read again and the patch retried a few times, before the
        retry is left to the caller. A pod that is gone, or already ungated, is not an error:
        someone else got there first.
        """
        current: Object | None = pod
        for attempt in range(_PATCH_RETRIES):
            if (
                current is None
                or objects.uid(current) != objects.uid(pod)
                or not objects.has_scheduling_gate(current, gate)
            ):
                return False
            namespace, name = object_key(current)
            gates = current["spec"]["schedulingGates"]
            patch = [
                {"op": "test", "path": "/metadata/uid", "value": objects.uid(pod)},
                {"op": "test", "path": "/spec/schedulingGates", "value": gates},
                {
                    "op": "replace",
                    "path": "/spec/schedulingGates",
                    "value": [g for g in gates if g.get("name") != gate],
                },
            ]
            try:
                raw.call(
                    self._core.patch_namespaced_pod,
                    name,
                    namespace,
                    patch,
                    _content_type=raw.JSON_PATCH,
                )
            except RetryableError:
                if self._gate_gone(pod, gate):
                    return True
                raise
            except InvalidError:  # a test failed: the gates (or the object) changed
                if attempt == _PATCH_RETRIES - 1:
                    raise
                current = self.read_pod(namespace, name)
                continue
            except NotFoundError:
                return False
            return True
        return False

    def _gate_gone(self, pod: Object, gate: str) -> bool:
        """After an error of unknown outcome: whether the pod now has no ``gate``."""
        namespace, name = object_key(pod)
        current = self.read_pod(namespace, name)
        gone = (
            current is not None
            and objects.uid(current) == objects.uid(pod)
            and not objects.has_scheduling_gate(current, gate)
        )
        if gone:
            log.info("write.confirmed", pod=f"{namespace}/{name}", gate=gate)
        return gone
