"""Every write the controller makes, each guarded by optimistic concurrency.

Each write sends the ``resourceVersion`` it was computed from, so a stale decision fails
with a conflict instead of overwriting someone else's change; the caller re-reads and decides
again. The order of a claim's writes makes every crash point safe (DESIGN.md §5):

- allocate: finalizer first, then ``status.allocation`` — a claim is never allocated without
  our finalizer, so it cannot be deleted while its capacity is in use unseen;
- release: clear ``status.allocation`` first, then the finalizer — a finalizer without an
  allocation is harmless and repaired on the next pass.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.errors import ConflictError
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

    def remove_gate(self, pod: Object, gate: str, reread: Callable[[], Object | None]) -> bool:
        """Remove ``gate`` from the pod; return False if the pod is gone.

        Pods change often (status updates by the kubelet are not ours to lose), so a conflict
        re-reads the pod and tries again a few times before giving up to the caller's retry.
        """
        current: Object | None = pod
        for attempt in range(_GATE_RETRIES):
            if current is None:
                return False
            gates = current["spec"].get("schedulingGates") or []
            if not any(g.get("name") == gate for g in gates):
                return True
            body = copy.deepcopy(current)
            body["spec"]["schedulingGates"] = [g for g in gates if g.get("name") != gate]
            namespace, name = object_key(current)
            try:
                raw.call(self._core.replace_namespaced_pod, name, namespace, body)
            except ConflictError:
                if attempt == _GATE_RETRIES - 1:
                    raise
                current = reread()
                continue
            return True
        return True
