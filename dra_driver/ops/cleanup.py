"""``gpushare-dra cleanup``: take this driver's finalizers and scheduling gates off the cluster.

After an uninstall nothing of the driver is left to remove them: a claim it allocated keeps
its finalizer (and cannot be deleted), a pod the webhook gated stays gated forever. Cleanup
first waits until the driver's own pods are gone (a running controller or webhook would add
them again), then removes, with one JSON patch per object that holds only if the object did
not change since it was read:

- the finalizer from every ResourceClaim, in every namespace (allocations stay: running pods
  keep their devices, and the claims can be deleted once their pods end);
- the scheduling gate from every pod, in every namespace (they go to kube-scheduler, which
  says why they cannot run while no driver publishes devices).

Running it twice changes nothing the second time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Final

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import InvalidError, NotFoundError
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.objects import Object

_ATTEMPTS: Final = 3
_POLL_SECONDS: Final = 2.0


class CleanupError(RuntimeError):
    """Cleanup could not run or finish; the message says what is left and what to do."""


@dataclasses.dataclass
class CleanupReport:
    """What cleanup changed (or, with ``dry_run``, would change)."""

    dry_run: bool
    claims: list[str] = dataclasses.field(default_factory=list)
    """``namespace/name`` of each claim whose finalizer was removed."""
    pods: list[str] = dataclasses.field(default_factory=list)
    """``namespace/name`` of each pod whose scheduling gate was removed."""

    def to_json(self) -> dict[str, object]:
        """Return the report as the ``-o json`` document."""
        return {"dryRun": self.dry_run, "finalizersRemoved": self.claims, "gatesRemoved": self.pods}

    def text(self, names: DriverNames) -> str:
        """Return the report for a person."""
        verb = "would remove" if self.dry_run else "removed"
        lines = [
            f"{verb} finalizer {names.finalizer} from {len(self.claims)} ResourceClaim(s)",
            *(f"  {key}" for key in self.claims),
            f"{verb} scheduling gate {names.scheduling_gate} from {len(self.pods)} pod(s)",
            *(f"  {key}" for key in self.pods),
        ]
        if not self.claims and not self.pods:
            lines.append(f"nothing of {names.driver} left to clean up")
        return "\n".join(lines)


def _key(obj: Object) -> str:
    return "/".join(object_key(obj))


@dataclasses.dataclass(frozen=True)
class Cleaner:
    """Cleanup through one API client; the clock is injected for the wait."""

    api_client: client.ApiClient
    names: DriverNames
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def wait_for_pods(self, namespace: str, selector: str, timeout: float) -> None:
        """Return once no pod in ``namespace`` matches ``selector``; CleanupError after timeout."""
        core = client.CoreV1Api(self.api_client)
        deadline = self.clock() + timeout
        while True:
            listed = raw.call(core.list_namespaced_pod, namespace, label_selector=selector)
            left = sorted(_key(pod) for pod in listed.get("items") or [])
            if not left:
                return
            if self.clock() >= deadline:
                message = (
                    f"after {timeout:g} s these pods of the driver still run: {', '.join(left)}; "
                    "uninstall the driver first (helm uninstall), or raise --wait-timeout"
                )
                raise CleanupError(message)
            self.sleep(min(_POLL_SECONDS, max(deadline - self.clock(), 0.0)))

    def run(self, *, dry_run: bool) -> CleanupReport:
        """Remove the finalizer from every claim and the gate from every pod; report them."""
        report = CleanupReport(dry_run=dry_run)
        resource, core = client.ResourceV1Api(self.api_client), client.CoreV1Api(self.api_client)
        finalizer, gate = self.names.finalizer, self.names.scheduling_gate
        claims = raw.call(resource.list_resource_claim_for_all_namespaces).get("items") or []
        for claim in claims:
            if finalizer in (claim["metadata"].get("finalizers") or []) and (
                dry_run or self._patch_claim(resource, claim)
            ):
                report.claims.append(_key(claim))
        pods = raw.call(core.list_pod_for_all_namespaces).get("items") or []
        for pod in pods:
            if objects.has_scheduling_gate(pod, gate) and (dry_run or self._patch_pod(core, pod)):
                report.pods.append(_key(pod))
        return report

    def _patch_claim(self, resource: client.ResourceV1Api, claim: Object) -> bool:
        def patch(current: Object) -> list[Object] | None:
            finalizers = current["metadata"].get("finalizers") or []
            if self.names.finalizer not in finalizers:
                return None
            kept = [f for f in finalizers if f != self.names.finalizer]
            return [{"op": "replace", "path": "/metadata/finalizers", "value": kept}]

        return self._patched(
            claim,
            patch,
            read=resource.read_namespaced_resource_claim,
            write=resource.patch_namespaced_resource_claim,
        )

    def _patch_pod(self, core: client.CoreV1Api, pod: Object) -> bool:
        def patch(current: Object) -> list[Object] | None:
            gates = objects.spec(current).get("schedulingGates") or []
            kept = [g for g in gates if g.get("name") != self.names.scheduling_gate]
            if len(kept) == len(gates):
                return None
            return [{"op": "replace", "path": "/spec/schedulingGates", "value": kept}]

        return self._patched(
            pod, patch, read=core.read_namespaced_pod, write=core.patch_namespaced_pod
        )

    def _patched(
        self,
        obj: Object,
        patch: Callable[[Object], list[Object] | None],
        *,
        read: Callable[..., Any],
        write: Callable[..., Any],
    ) -> bool:
        """Apply ``patch`` to ``obj`` as read; on a concurrent change, re-read and retry.

        The leading ``test`` of the resourceVersion makes the API server refuse (422) a patch
        computed from an object that changed since: a list replaced whole must not drop what
        someone else added in between. ``read`` and ``write`` are the generated client's
        methods that read and patch an object of ``obj``'s kind.
        """
        namespace, name = object_key(obj)
        current = obj
        for _ in range(_ATTEMPTS):
            operations = patch(current)
            if operations is None or objects.uid(current) != objects.uid(obj):
                return False
            version = current["metadata"]["resourceVersion"]
            test = {"op": "test", "path": "/metadata/resourceVersion", "value": version}
            try:
                raw.call(write, name, namespace, [test, *operations], _content_type=raw.JSON_PATCH)
            except NotFoundError:
                return False
            except InvalidError:
                try:
                    current = raw.call(read, name, namespace)
                except NotFoundError:
                    return False
                continue
            return True
        message = f"{_key(obj)} kept changing while cleanup patched it; run cleanup again"
        raise CleanupError(message)
