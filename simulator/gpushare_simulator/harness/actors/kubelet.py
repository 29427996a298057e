"""What the kubelet does with DRA drivers for the pods bound to its node.

- finds plugins through its plugin watcher (``pluginwatcher``);
- before preparing, checks what the real kubelet checks (claim exists, owned by the pod when
  generated, reserved for the pod, allocated, driver registered);
- calls ``NodePrepareResources`` once per driver for all of a pod's claims over the real gRPC
  socket, resolves the returned CDI IDs against the spec files into the container's edits and
  marks the pod Running; calls ``NodeUnprepareResources`` when the last pod using a claim on the
  node is gone or finished.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Final

import grpc
from kubernetes import client

from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import NotFoundError
from dra_driver.k8s.events import EventRecorder
from dra_driver.k8s.informer import EventType, Informer, object_key
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import ReconcileLoop, Requeue
from dra_driver.k8s.timestamps import rfc3339
from gpushare_simulator.harness.actors.cdiresolve import (
    ContainerEdits,
    UnresolvableCDIDevicesError,
    resolve,
)
from gpushare_simulator.harness.actors.pluginwatcher import PluginWatcher
from gpushare_simulator.harness.lifecycle import Lifecycle
from gpushare_simulator.harness.podstatus import patch_pod_status

_RETRY_SECONDS: Final = 0.5


@dataclasses.dataclass
class PreparedClaim:
    """A claim prepared on this node, and the pods on the node that use it."""

    driver: str
    reference: Object
    devices: list[Any]
    pods: set[str]


class Kubelet(Lifecycle):
    """Emulates one node's kubelet for DRA; tests read :attr:`containers` to see the edits."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        registry_dir: Path,
        cdi_roots: list[Path],
    ) -> None:
        self.node_name = node_name
        self._core = client.CoreV1Api(api_client)
        self._resource = client.ResourceV1Api(api_client)
        self._events = EventRecorder(api_client, f"kubelet-{node_name}")
        self._cdi_roots = cdi_roots
        self.watcher = PluginWatcher(registry_dir, node_name)
        self.plugins = self.watcher.plugins
        self.prepared: dict[str, PreparedClaim] = {}
        self.containers: dict[tuple[str, str, str], ContainerEdits] = {}
        self._loop: ReconcileLoop[tuple[str, str]] = ReconcileLoop(
            f"kubelet-{node_name}", self._sync_pod
        )
        self._pods = Informer(
            self._core.list_pod_for_all_namespaces,
            name=f"kubelet-{node_name}",
            field_selector=f"spec.nodeName={node_name}",
            handler=self._on_pod,
        )
        # UIDs of pods deleted from the API, so their claims can be released.
        self._deleted: dict[tuple[str, str], str] = {}

    def start(self) -> None:
        """Start the plugin watcher and the pod loop."""
        self.watcher.start()
        self._pods.start()
        self._pods.wait_synced()
        self._loop.start()

    def stop(self) -> None:
        """Stop everything and close plugin connections."""
        self._loop.stop()
        self._pods.stop()
        self.watcher.stop()

    # -- pods ----------------------------------------------------------------------------

    def _on_pod(self, kind: EventType, pod: Object) -> None:
        key = object_key(pod)
        if kind == "DELETED":
            self._deleted[key] = objects.uid(pod)
        self._loop.queue.add(key)

    def _sync_pod(self, key: tuple[str, str]) -> None:
        pod = self._pods.get(*key)
        if pod is None:
            uid = self._deleted.get(key)
            if uid is not None:
                self._release(key, uid)
                self._deleted.pop(key, None)
            return
        if objects.is_terminal(pod) or objects.is_deleting(pod):
            self._release(key, objects.uid(pod))
            return
        if objects.status(pod).get("phase") == "Running":
            return
        try:
            claims = self._checked_claims(pod)
            self._prepare(pod, claims)
            self._start_containers(pod, claims)
        except (_PrepareError, UnresolvableCDIDevicesError) as exc:
            self._events.record(pod, "Warning", "FailedPrepareDynamicResources", str(exc))
            raise Requeue(_RETRY_SECONDS, str(exc)) from exc

    def _checked_claims(self, pod: Object) -> dict[str, Object]:
        namespace, pod_name = object_key(pod)
        claims: dict[str, Object] = {}
        templates = {
            e["name"]
            for e in pod["spec"].get("resourceClaims") or []
            if e.get("resourceClaimTemplateName")
        }
        for entry, name in objects.pod_claim_names(pod).items():
            if name is None:
                continue
            try:
                claim = raw.call(self._resource.read_namespaced_resource_claim, name, namespace)
            except NotFoundError as exc:
                raise _PrepareError(f"failed to fetch ResourceClaim {name}: not found") from exc
            if entry in templates and objects.controller_uid(claim) != objects.uid(pod):
                raise _PrepareError(f"ResourceClaim {name} was not created for pod {pod_name}")
            if objects.uid(pod) not in objects.reserved_uids(claim):
                raise _PrepareError(
                    f"pod {pod_name} ({objects.uid(pod)}) is not allowed to use "
                    f"ResourceClaim {name}"
                )
            allocation = objects.status(claim).get("allocation")
            if not allocation:
                raise _PrepareError(f"ResourceClaim {name} is not allocated")
            for result in (allocation.get("devices") or {}).get("results") or []:
                if result["driver"] not in self.plugins:
                    raise _PrepareError(f"DRA driver {result['driver']} is not registered")
            claims[entry] = claim
        return claims

    def _prepare(self, pod: Object, claims: dict[str, Object]) -> None:
        by_driver: dict[str, list[Object]] = {}
        for claim in claims.values():
            if objects.uid(claim) in self.prepared:
                self.prepared[objects.uid(claim)].pods.add(objects.uid(pod))
                continue
            results = claim["status"]["allocation"]["devices"]["results"]
            for driver in sorted({r["driver"] for r in results}):
                by_driver.setdefault(driver, []).append(claim)
        for driver, driver_claims in by_driver.items():
            references = [
                {
                    "namespace": c["metadata"]["namespace"],
                    "uid": objects.uid(c),
                    "name": c["metadata"]["name"],
                }
                for c in driver_claims
            ]
            try:
                responses = self.plugins[driver].prepare(references)
            except grpc.RpcError as exc:
                raise _PrepareError(
                    f"NodePrepareResources failed for driver {driver}: {exc.code()}"
                ) from exc
            for reference in references:
                response = responses.get(reference["uid"])
                if response is None:
                    raise _PrepareError(
                        f"driver {driver} returned no result for claim {reference['name']}"
                    )
                if response.error:
                    raise _PrepareError(
                        f"prepare of claim {reference['name']} failed: {response.error}"
                    )
                self.prepared[reference["uid"]] = PreparedClaim(
                    driver, reference, list(response.devices), {objects.uid(pod)}
                )

    def _start_containers(self, pod: Object, claims: dict[str, Object]) -> None:
        namespace, pod_name = object_key(pod)
        for container in pod["spec"].get("containers") or []:
            cdi_ids: list[str] = []
            for use in (container.get("resources") or {}).get("claims") or []:
                claim = claims.get(use["name"])
                if claim is None:
                    continue
                for device in self.prepared[objects.uid(claim)].devices:
                    names = list(device.request_names)
                    if not use.get("request") or not names or use["request"] in names:
                        cdi_ids.extend(device.cdi_device_ids)
            self.containers[(namespace, pod_name, container["name"])] = resolve(
                cdi_ids, self._cdi_roots
            )
        now = rfc3339()
        status = {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": now}},
                }
                for c in pod["spec"].get("containers") or []
            ],
            "startTime": now,
        }
        patch_pod_status(self._core, pod, status)

    def _release(self, key: tuple[str, str], pod_uid: str) -> None:
        """Forget the pod's containers; unprepare claims no other pod on the node uses."""
        for container_key in [k for k in self.containers if k[:2] == key]:
            del self.containers[container_key]
        for claim_uid, prepared in list(self.prepared.items()):
            if pod_uid not in prepared.pods:
                continue
            prepared.pods.discard(pod_uid)
            if prepared.pods:
                continue
            plugin = self.plugins.get(prepared.driver)
            error = (
                "driver is not registered"
                if plugin is None
                else plugin.unprepare(prepared.reference)
            )
            if error:
                prepared.pods.add(pod_uid)
                raise Requeue(_RETRY_SECONDS, f"unprepare of claim {claim_uid} failed: {error}")
            del self.prepared[claim_uid]

    def complete_pod(self, namespace: str, name: str, *, succeeded: bool = True) -> None:
        """Mark a pod's containers as exited, as the kubelet does when a Job's pod finishes."""
        pod = {"metadata": {"namespace": namespace, "name": name}}
        patch_pod_status(self._core, pod, {"phase": "Succeeded" if succeeded else "Failed"})


class _PrepareError(Exception):
    """A claim of the pod cannot be prepared yet; the kubelet retries."""
