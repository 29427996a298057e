"""What kube-controller-manager's resourceclaim controller does, as far as the driver sees it.

- creates one ResourceClaim per pod entry that names a ResourceClaimTemplate, owned by the pod,
  and records it in ``pod.status.resourceClaimStatuses``;
- removes ``reservedFor`` entries of pods that are gone or finished;
- deallocates claims that kube-scheduler allocated (builtin finalizer) once nobody uses them;
- deletes generated claims when their pod is gone or finished.
Claims allocated by anyone else (our controller) are never deallocated here.
"""

from __future__ import annotations

import json
from typing import Any, Final

import yaml
from kubernetes import client

from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import AlreadyExistsError, NotFoundError, translate_errors
from dra_driver.k8s.events import EventRecorder
from dra_driver.k8s.informer import EventType, Informer, object_key
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import ReconcileLoop
from dra_driver.structured.configshares import SCHEDULER_FINALIZER
from gpushare_simulator.harness.lifecycle import Lifecycle
from gpushare_simulator.harness.podstatus import patch_pod_status

POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"

Key = tuple[str, str, str]
"""("pod" | "claim", namespace, name)."""


class ResourceClaimController(Lifecycle):
    """Emulates the kube-controller-manager resourceclaim controller on the harness."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api_client)
        self._resource = client.ResourceV1Api(api_client)
        self._events = EventRecorder(api_client, "resourceclaim-controller")
        self._loop: ReconcileLoop[Key] = ReconcileLoop("claim-controller", self._reconcile)
        self._pods = Informer(
            self._core.list_pod_for_all_namespaces, name="kcm-pods", handler=self._on_pod
        )
        self._claims = Informer(
            self._resource.list_resource_claim_for_all_namespaces,
            name="kcm-claims",
            handler=self._on_claim,
        )
        # Claims we created but the informer may not show yet: (pod uid, entry) -> claim name.
        self._created: dict[tuple[str, str], str] = {}

    def start(self) -> None:
        """Start watching; reconcile only once both caches are complete."""
        self._pods.start()
        self._claims.start()
        self._pods.wait_synced()
        self._claims.wait_synced()
        self._loop.start()
        for pod in self._pods.list():
            self._on_pod("ADDED", pod)
        for claim in self._claims.list():
            self._on_claim("ADDED", claim)

    def stop(self) -> None:
        """Stop the loop and the watches."""
        self._loop.stop()
        self._pods.stop()
        self._claims.stop()

    # -- event routing -------------------------------------------------------------------

    def _on_pod(self, _: EventType, pod: Object) -> None:
        namespace, name = object_key(pod)
        self._loop.queue.add(("pod", namespace, name))
        uid = objects.uid(pod)
        for claim in self._claims.list():
            if object_key(claim)[0] == namespace and (
                objects.controller_uid(claim) == uid or uid in objects.reserved_uids(claim)
            ):
                self._loop.queue.add(("claim", *object_key(claim)))

    def _on_claim(self, _: EventType, claim: Object) -> None:
        self._loop.queue.add(("claim", *object_key(claim)))

    def _reconcile(self, key: Key) -> None:
        kind, namespace, name = key
        if kind == "pod":
            self._sync_pod(namespace, name)
        else:
            self._sync_claim(namespace, name)

    # -- pods: create claims from templates ----------------------------------------------

    def _sync_pod(self, namespace: str, name: str) -> None:
        pod = self._pods.get(namespace, name)
        if pod is None or objects.is_terminal(pod) or objects.is_deleting(pod):
            return
        statuses = list(pod.get("status", {}).get("resourceClaimStatuses") or [])
        recorded = {status["name"] for status in statuses}
        for entry in pod["spec"].get("resourceClaims") or []:
            template = entry.get("resourceClaimTemplateName")
            if not template or entry["name"] in recorded:
                continue
            claim_name = self._generated_claim(pod, entry["name"]) or self._create_claim(
                pod, entry["name"], template
            )
            if claim_name is None:
                return
            statuses.append({"name": entry["name"], "resourceClaimName": claim_name})
            recorded.add(entry["name"])
            claims = {"resourceClaimStatuses": statuses}
            pod = patch_pod_status(self._core, pod, claims, if_unchanged=True)

    def _generated_claim(self, pod: Object, entry: str) -> str | None:
        uid = objects.uid(pod)
        if (uid, entry) in self._created:
            return self._created[(uid, entry)]
        for claim in self._claims.list():
            annotations = claim["metadata"].get("annotations") or {}
            if (
                objects.controller_uid(claim) == uid
                and annotations.get(POD_CLAIM_NAME_ANNOTATION) == entry
            ):
                return str(claim["metadata"]["name"])
        return None

    def _create_claim(self, pod: Object, entry: str, template_name: str) -> str | None:
        namespace, pod_name = object_key(pod)
        try:
            template = raw.call(
                self._resource.read_namespaced_resource_claim_template, template_name, namespace
            )
        except NotFoundError:
            self._events.record(
                pod,
                "Warning",
                "FailedResourceClaimCreation",
                f"PodResourceClaim {entry}: resource claim template {template_name!r} not found",
            )
            raise
        template_meta = template["spec"].get("metadata") or {}
        body: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{pod_name[:40]}-{entry[:20]}-",
                "namespace": namespace,
                "labels": template_meta.get("labels") or {},
                "annotations": {
                    **(template_meta.get("annotations") or {}),
                    POD_CLAIM_NAME_ANNOTATION: entry,
                },
                "ownerReferences": [objects.owner_reference(pod)],
            },
            "spec": template["spec"]["spec"],
        }
        try:
            claim = self._post_claim(namespace, body)
        except AlreadyExistsError:
            return None
        claim_name = str(claim["metadata"]["name"])
        self._created[(objects.uid(pod), entry)] = claim_name
        return claim_name

    def _post_claim(self, namespace: str, body: Object) -> Object:
        """Create a claim the way its opaque ``parameters`` bytes come out compact.

        kube-controller-manager sends the template's bytes over protobuf; the Python client
        would send ``json.dumps`` with spaces, which then no JSON or merge patch (the driver's
        writes) could get past. Sent as YAML, the server stores them as Go's compact JSON.
        """
        api = self._resource.api_client
        request = api.param_serialize(
            method="POST",
            resource_path="/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims",
            path_params={"namespace": namespace},
            header_params={"Accept": "application/json", "Content-Type": "application/yaml"},
            body=yaml.safe_dump(body, sort_keys=False),
            auth_settings=["BearerToken"],
        )
        with translate_errors():
            response = api._call_with_legacy_options(  # the generated methods' own path
                request, {}, async_req=None, preload_content=False, request_timeout=None,
                return_http_data_only=True,
            )  # fmt: skip
            data = response.data
        created: Object = json.loads(data)
        return created

    # -- claims: reservations, deallocation, deletion -------------------------------------

    def _patch(self, claim: Object, changes: Object, *, status_write: bool) -> None:
        """Merge-patch ``changes`` into the claim at the resourceVersion it was read at.

        kube-controller-manager updates claims over protobuf, which sends every opaque
        ``parameters`` back in the bytes it read; a JSON client can only match that by naming
        the fields it changes. The ``resourceVersion`` makes it fail on a stale claim (409),
        as the update does.
        """
        namespace, name = object_key(claim)
        version = {"resourceVersion": claim["metadata"]["resourceVersion"]}
        body = {**changes, "metadata": {**objects.metadata(changes), **version}}
        write = (
            self._resource.patch_namespaced_resource_claim_status
            if status_write
            else self._resource.patch_namespaced_resource_claim
        )
        raw.call(write, name, namespace, body, _content_type=raw.MERGE_PATCH)

    def _pod_done(self, namespace: str, reference: Object) -> bool:
        pod = self._pods.get(namespace, reference.get("name", ""))
        return pod is None or objects.uid(pod) != reference.get("uid") or objects.is_terminal(pod)

    def _sync_claim(self, namespace: str, name: str) -> None:
        claim = self._claims.get(namespace, name)
        if claim is None:
            return
        status = objects.status(claim)
        reserved = status.get("reservedFor") or []
        keep = [ref for ref in reserved if not self._pod_done(namespace, ref)]
        if len(keep) != len(reserved):
            self._patch(claim, {"status": {"reservedFor": keep or None}}, status_write=True)
            return
        finalizers = claim["metadata"].get("finalizers") or []
        if not keep and SCHEDULER_FINALIZER in finalizers:
            if status.get("allocation"):
                cleared = {"allocation": None, "devices": None}
                self._patch(claim, {"status": cleared}, status_write=True)
                return
            remaining = [f for f in finalizers if f != SCHEDULER_FINALIZER]
            self._patch(claim, {"metadata": {"finalizers": remaining or None}}, status_write=False)
            return
        owner_uid = objects.controller_uid(claim)
        owner = objects.controller_reference(claim)
        if (
            owner is not None
            and owner.get("kind") == "Pod"
            and not objects.is_deleting(claim)
            and self._pod_done(namespace, {"name": owner.get("name"), "uid": owner_uid})
        ):
            raw.call(
                self._resource.delete_namespaced_resource_claim,
                name,
                namespace,
                body={"preconditions": {"uid": objects.uid(claim)}},
            )
