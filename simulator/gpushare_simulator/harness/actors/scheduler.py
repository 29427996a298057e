"""What kube-scheduler does with pods that use ResourceClaims, as far as the driver sees it.

- ignores pods that still carry scheduling gates, and pods whose claims do not exist yet;
- respects allocations someone else made (it only restricts the pod to their nodeSelector) and
  reserves them for the pod in PreBind, which on 1.36 also writes ``allocationTimestamp`` — so
  an external allocation without one is refused by the API server ("field is immutable") and
  the pod stays Pending with a PreBind error event, as a real 1.36 control plane was seen to
  do (which is why the controller writes ``allocationTimestamp`` itself);
- allocates unallocated claims first-fit with consumable capacity (``firstfit``), adding the
  builtin finalizer, and binds the pod.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from kubernetes import client

from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import InvalidError
from dra_driver.k8s.events import EventRecorder
from dra_driver.k8s.informer import EventType, Informer, object_key
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import ReconcileLoop, Requeue
from dra_driver.k8s.scheduling import node_selector_matches, node_unfit_reason
from dra_driver.k8s.timestamps import rfc3339
from dra_driver.logging import get_logger
from dra_driver.structured.configshares import SCHEDULER_FINALIZER
from gpushare_simulator.harness.actors.firstfit import (
    AllocatedState,
    Unallocatable,
    allocate_on_node,
)
from gpushare_simulator.harness.lifecycle import Lifecycle
from gpushare_simulator.harness.podstatus import patch_pod_status

PodKey = tuple[str, str]

log = get_logger(__name__)

# Retry cadence for pods that cannot be placed yet; events also wake them sooner.
_UNSCHEDULABLE_RETRY_SECONDS: Final = 1.0


@dataclasses.dataclass(frozen=True)
class _Cluster:
    """What a scheduling attempt reads of the cluster (allocate_on_node copies the state)."""

    slices: list[Object]
    classes: dict[str, Object]
    state: AllocatedState


class Scheduler(Lifecycle):
    """Emulates kube-scheduler's DynamicResources plugin and binding on the harness."""

    def __init__(
        self, api_client: client.ApiClient, *, sets_allocation_timestamp: bool = True
    ) -> None:
        core = client.CoreV1Api(api_client)
        resource = client.ResourceV1Api(api_client)
        self._core, self._resource = core, resource
        self._sets_allocation_timestamp = sets_allocation_timestamp
        self._events = EventRecorder(api_client, "default-scheduler")
        self._loop: ReconcileLoop[PodKey] = ReconcileLoop("scheduler", self._schedule)
        self._pods = Informer(
            core.list_pod_for_all_namespaces, name="sched-pods", handler=self._on_pod
        )
        self._informers = [
            self._pods,
            Informer(
                resource.list_resource_claim_for_all_namespaces,
                name="sched-claims",
                handler=self._wake,
            ),
            Informer(resource.list_resource_slice, name="sched-slices", handler=self._wake),
            Informer(resource.list_device_class, name="sched-classes", handler=self._wake),
            Informer(core.list_node, name="sched-nodes", handler=self._wake),
        ]
        self._claims, self._slices, self._classes, self._nodes = self._informers[1:]
        # Our own writes, until the informer catches up: the next decision must see them.
        self._assumed: dict[tuple[str, str], Object] = {}

    def start(self) -> None:
        """Start watching and scheduling."""
        for informer in self._informers:
            informer.start()
        for informer in self._informers:
            informer.wait_synced()
        self._loop.start()
        self._wake("ADDED", {})

    def stop(self) -> None:
        """Stop scheduling and watching."""
        self._loop.stop()
        for informer in self._informers:
            informer.stop()

    def _on_pod(self, _: EventType, pod: Object) -> None:
        if not objects.spec(pod).get("nodeName"):
            self._loop.queue.add(object_key(pod))

    def _wake(self, _: EventType, __: Object) -> None:
        for pod in self._pods.list():
            self._on_pod("MODIFIED", pod)

    def _claim(self, namespace: str, name: str) -> Object | None:
        cached = self._claims.get(namespace, name)
        assumed = self._assumed.get((namespace, name))
        version = objects.resource_version_number
        if assumed is not None and version(assumed) > version(cached):
            return assumed
        self._assumed.pop((namespace, name), None)
        return cached

    def _all_claims(self) -> list[Object]:
        seen = {object_key(c): c for c in self._claims.list()}
        for key in list(self._assumed):
            claim = self._claim(*key)
            if claim is not None:
                seen[key] = claim
        return list(seen.values())

    # -- one scheduling cycle ------------------------------------------------------------

    def _schedule(self, key: PodKey) -> None:
        pod = self._pods.get(*key)
        spec = (pod or {}).get("spec") or {}
        if pod is None or spec.get("nodeName") or spec.get("schedulingGates"):
            return
        if objects.is_deleting(pod) or objects.is_terminal(pod):
            return
        claims = self._pod_claims(pod)
        if claims is None:
            return
        nodes = sorted(self._nodes.list(), key=lambda n: n["metadata"]["name"])
        # Read once per pod, not per node tried: the cluster's slices, classes and claims.
        cluster = _Cluster(
            self._slices.list(),
            {c["metadata"]["name"]: c for c in self._classes.list()},
            AllocatedState.from_claims(self._all_claims()),
        )
        reasons: dict[str, str] = {}
        for node in nodes:
            reason = self._try_node(pod, claims, node, cluster)
            if reason is None:
                return
            reasons[node["metadata"]["name"]] = reason
        self._unschedulable(pod, reasons)

    def _pod_claims(self, pod: Object) -> list[Object] | None:
        namespace = pod["metadata"]["namespace"]
        claims = []
        for entry, name in objects.pod_claim_names(pod).items():
            claim = None if name is None else self._claim(namespace, name)
            if claim is None:
                # PreEnqueue: wait until kube-controller-manager has created it.
                return None
            generated = any(
                e["name"] == entry and e.get("resourceClaimTemplateName")
                for e in pod["spec"].get("resourceClaims") or []
            )
            if generated and objects.controller_uid(claim) != objects.uid(pod):
                return None
            claims.append(claim)
        return claims

    def _try_node(
        self, pod: Object, claims: list[Object], node: Object, cluster: _Cluster
    ) -> str | None:
        reason = node_unfit_reason(pod, node)
        if reason is not None:
            return reason
        for claim in claims:
            if objects.is_deleting(claim):
                return f"resourceclaim {claim['metadata']['name']} is being deleted"
            allocation = objects.status(claim).get("allocation")
            if allocation and not node_selector_matches(allocation.get("nodeSelector"), node):
                return "resourceclaim not available on the node"
        pending = [c for c in claims if not objects.status(c).get("allocation")]
        allocations: list[Object] = []
        if pending:
            try:
                allocations = allocate_on_node(
                    node["metadata"]["name"],
                    pending,
                    cluster.slices,
                    cluster.classes,
                    cluster.state,
                    allocation_timestamp=rfc3339() if self._sets_allocation_timestamp else None,
                )
            except Unallocatable as exc:
                # The per-node detail goes to the log; the message aggregates like the real one.
                log.debug("scheduler.unallocatable", node=node["metadata"]["name"], reason=str(exc))
                return "cannot allocate all claims"
        names = (c["metadata"]["name"] for c in pending)
        self._bind(pod, node, claims, dict(zip(names, allocations, strict=True)))
        return None

    # -- PreBind and Bind ----------------------------------------------------------------

    def _bind(
        self, pod: Object, node: Object, claims: list[Object], new: dict[str, Object]
    ) -> None:
        """Write new allocations, reserve every claim for the pod, then bind it (PreBind, Bind)."""
        namespace, pod_name = object_key(pod)
        for claim in claims:
            self._reserve(pod, claim, new.get(claim["metadata"]["name"]))
        node_name = node["metadata"]["name"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod_name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        raw.call(self._core.create_namespaced_pod_binding, pod_name, namespace, binding)
        self._events.record(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {namespace}/{pod_name} to {node_name}",
        )

    def _reserve(self, pod: Object, claim: Object, allocation: Object | None) -> None:
        """Add the pod to ``reservedFor``, writing ``allocation`` first if it is new.

        kube-scheduler updates claims over protobuf, which sends every opaque ``parameters``
        back in the bytes it read; a JSON client can only match that by naming the fields it
        changes, so both writes are patches. Their ``resourceVersion`` is the update's
        precondition (409 on a stale claim), and the new allocation is a JSON patch value,
        whose text the server keeps in its key order, as the copy kube-scheduler makes does.
        """
        namespace, pod_name = object_key(pod)
        name = claim["metadata"]["name"]
        if allocation is not None:
            finalizers = [*(claim["metadata"].get("finalizers") or []), SCHEDULER_FINALIZER]
            metadata = {"resourceVersion": claim["metadata"]["resourceVersion"]}
            claim = raw.call(
                self._resource.patch_namespaced_resource_claim,
                name,
                namespace,
                {"metadata": {**metadata, "finalizers": finalizers}},
                _content_type=raw.MERGE_PATCH,
            )
        elif objects.uid(pod) in objects.reserved_uids(claim):
            return
        status: dict[str, Any] = dict(claim.get("status") or {})
        version = claim["metadata"]["resourceVersion"]
        operations: list[Object] = [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": version}
        ]
        if "status" not in claim:
            operations.append({"op": "add", "path": "/status", "value": {}})
        if allocation is not None:
            operations.append({"op": "add", "path": "/status/allocation", "value": allocation})
        elif self._sets_allocation_timestamp and "allocationTimestamp" not in status["allocation"]:
            # kube-scheduler 1.36 stamps every claim it reserves in PreBind.
            stamp = {"op": "add", "path": "/status/allocation/allocationTimestamp"}
            operations.append({**stamp, "value": rfc3339()})
        reference = {"resource": "pods", "name": pod_name, "uid": objects.uid(pod)}
        reserved = [*(status.get("reservedFor") or []), reference]
        operations.append({"op": "add", "path": "/status/reservedFor", "value": reserved})
        try:
            written = raw.call(
                self._resource.patch_namespaced_resource_claim_status,
                name,
                namespace,
                operations,
                _content_type=raw.JSON_PATCH,
            )
        except InvalidError as exc:
            message = f'running PreBind plugin "DynamicResources": {exc.message}'
            self._events.record(pod, "Warning", "FailedScheduling", message)
            raise Requeue(_UNSCHEDULABLE_RETRY_SECONDS, message) from exc
        self._assumed[(namespace, name)] = written

    def _unschedulable(self, pod: Object, reasons: dict[str, str]) -> None:
        counts: dict[str, int] = {}
        for reason in reasons.values():
            counts[reason] = counts.get(reason, 0) + 1
        detail = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
        message = f"0/{len(reasons)} nodes are available: {detail}."
        conditions = [
            c
            for c in objects.status(pod).get("conditions") or []
            if c.get("type") != "PodScheduled"
        ]
        previous = next(
            (
                c
                for c in objects.status(pod).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ),
            None,
        )
        if previous is None or previous.get("message") != message:
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": rfc3339(),
                }
            )
            patch_pod_status(self._core, pod, {"conditions": conditions})
            self._events.record(pod, "Warning", "FailedScheduling", message)
        raise Requeue(_UNSCHEDULABLE_RETRY_SECONDS, message)
