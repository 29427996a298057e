"""Every write the controller makes, each guarded by optimistic concurrency, and its live reads.

Each write sends the ``resourceVersion`` it was computed from, so a stale decision fails
with a conflict instead of overwriting someone else's change; the caller re-reads and decides
again. The order of a claim's writes makes every crash point safe:

- allocate: ``status.allocation`` first (tentative), then, once checked against what others
  wrote meanwhile, our finalizer (committed), then the pod's gate. A crash before the
  finalizer leaves a tentative claim whose pod is still gated: no pod can run on it, and the
  next pass checks and commits it, or clears it;
- release: clear ``status.allocation`` first, then the finalizer — a finalizer without an
  allocation is harmless and removed on the next pass.

DESIGN.md §5 lists the finalizer before the allocation; the finalizer comes second here
because it is what marks the allocation checked (see :mod:`dra_driver.controller.allocator`).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from kubernetes import client

from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import ApiError, ConflictError, NotFoundError
from dra_driver.k8s.informer import object_key

Object = dict[str, Any]

_GATE_RETRIES: Final = 5


class ClaimWriter:
    """Writes claims and pods through one API client."""

    def __init__(self, api_client: client.ApiClient, finalizer: str) -> None:
        self._resource = client.ResourceV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._finalizer = finalizer

    def add_finalizer(self, claim: Object) -> Object:
        """Return the claim with our finalizer, adding it if missing."""
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if self._finalizer in finalizers:
            return claim
        return self._replace(claim, [*finalizers, self._finalizer])

    def remove_finalizer(self, claim: Object) -> Object:
        """Return the claim without our finalizer, removing it if present."""
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if self._finalizer not in finalizers:
            return claim
        return self._replace(claim, [f for f in finalizers if f != self._finalizer])

    def _replace(self, claim: Object, finalizers: list[str]) -> Object:
        body = copy.deepcopy(claim)
        body["metadata"]["finalizers"] = finalizers
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        return raw.call(self._resource.replace_namespaced_resource_claim, name, namespace, body)

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

    def write_allocation(self, claim: Object, allocation: Object) -> Object:
        """Set ``status.allocation`` (immutable once set: only a cleared claim takes one)."""
        body = copy.deepcopy(claim)
        body["status"] = {**(body.get("status") or {}), "allocation": allocation}
        return self._replace_status(body)

    def clear_allocation(self, claim: Object) -> Object:
        """Clear ``status.allocation`` and the device statuses that belong to it."""
        body = copy.deepcopy(claim)
        status = body.get("status") or {}
        body["status"] = {
            k: v for k, v in status.items() if k not in ("allocation", "devices", "reservedFor")
        }
        return self._replace_status(body)

    def _replace_status(self, body: Object) -> Object:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        return raw.call(
            self._resource.replace_namespaced_resource_claim_status, name, namespace, body
        )

    def remove_gate(self, pod: Object, gate: str) -> bool:
        """Remove ``gate`` from the pod; return whether this call removed it.

        ``pod`` may be a stale cached copy; a conflict re-reads the pod from the API server
        (status updates by others are not ours to lose) and tries again a few times before
        leaving the retry to the caller. A pod that is gone, or already ungated, is not an
        error: someone else got there first.
        """
        current: Object = pod
        for attempt in range(_GATE_RETRIES):
            gates = current["spec"].get("schedulingGates") or []
            if not any(g.get("name") == gate for g in gates):
                return False
            body = copy.deepcopy(current)
            body["spec"]["schedulingGates"] = [g for g in gates if g.get("name") != gate]
            namespace, name = object_key(current)
            try:
                raw.call(self._core.replace_namespaced_pod, name, namespace, body)
            except ConflictError:
                if attempt == _GATE_RETRIES - 1:
                    raise
                try:
                    current = raw.call(self._core.read_namespaced_pod, name, namespace)
                except NotFoundError:
                    return False
                if objects.uid(current) != objects.uid(pod):
                    return False
                continue
            except NotFoundError:
                return False
            return True
        return False
