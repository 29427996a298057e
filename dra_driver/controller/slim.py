"""What the controller's informers keep of each object: the fields it reads, nothing else.

At 1,000 nodes and 20,000 pods the informers' caches are most of the controller's memory, and
most of each object is what the controller never reads: a pod's environment, command, probes,
volumes and container statuses, a node's image list and conditions, every object's
``managedFields``. :class:`Slimmer`'s methods are the informers' transforms.

Pods and nodes are only ever read and patched, so they keep just what the allocator, the node
fit, affinity, spread, the release loop and event references read. Claims lose only
``metadata.managedFields``: the engine and the release loop read most of the rest (every
claim write is a patch of the fields it changes: nothing of a cached claim is sent back).
Slices keep every field (the engine reads nearly all of them) and DeviceClasses are kept as
they are: there are few.

What is kept is also :func:`~dra_driver.k8s.compact.compact`: every key and short string
interned, so the twenty thousand copies of ``"metadata"``, ``"resource.k8s.io/v1"`` or a
node's name are one object; and :class:`Slimmer` keeps equal parts of different objects once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dra_driver.k8s import objects
from dra_driver.k8s.compact import SHARED_PARTS, SharedParts, compact, pick
from dra_driver.k8s.objects import Object

# No resourceVersion: nothing reads a pod's or a node's, and without it an update that changes
# nothing kept (a heartbeat, container statuses) leaves the slim object equal, so the informer
# drops it instead of waking the controller.
_POD_METADATA: Final = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
)
_POD_SPEC: Final = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "schedulingGates",
    "resourceClaims",
    "overhead",
    "resources",
    "topologySpreadConstraints",
    "priority",
    "preemptionPolicy",
)
_BOUND_POD_SPEC: Final = (
    "nodeName",
    "affinity",
    "resourceClaims",
    "overhead",
    "resources",
    "priority",
    "terminationGracePeriodSeconds",
)
"""Anti-affinity stays: it keeps other pods off the node. Priority and grace: preemption."""
_CONTAINER: Final = ("name", "restartPolicy")
_POD_STATUS: Final = ("phase", "resourceClaimStatuses")
_NODE_METADATA: Final = ("name", "uid", "labels")
_NODE_SPEC: Final = ("taints", "unschedulable")
_NODE_STATUS: Final = ("allocatable",)


def _head(obj: Mapping[str, Any]) -> Object:
    return pick(obj, ("apiVersion", "kind"))


def _container(container: object) -> Object:
    """Keep what node fit reads: requests, and only the ports that claim a host port."""
    kept = pick(container, _CONTAINER)
    if not isinstance(container, Mapping):
        return kept
    requests = (container.get("resources") or {}).get("requests")
    if requests:
        kept["resources"] = {"requests": requests}
    ports = [
        p for p in container.get("ports") or () if isinstance(p, Mapping) and p.get("hostPort")
    ]
    if ports:
        kept["ports"] = ports
    return kept


class Slimmer:
    """The informers' transforms, sharing equal parts between the objects they keep.

    Claims made from one template have one spec, claims on one node one nodeSelector, pods of
    one Deployment one container list and label set: each is kept once, through a bounded
    table keyed by the part's JSON. Safe because the controller never changes a cached object
    in place (its writes work on copies).
    """

    def __init__(self, limit: int = SHARED_PARTS) -> None:
        self._parts = SharedParts(limit)
        self._share = self._parts.share

    def pod(self, pod: Object) -> Object:
        """Return the parts of a pod the controller reads.

        A bound pod is never placed again: only what other pods' placement and the node's
        fit read of it is kept (not its tolerations, node selector or spread constraints).
        """
        spec = objects.spec(pod)
        kept = pick(spec, _BOUND_POD_SPEC if spec.get("nodeName") else _POD_SPEC)
        for key in ("containers", "initContainers"):
            if isinstance(spec.get(key), list):
                kept[key] = [_container(container) for container in spec[key]]
        slim: Object = compact(
            {
                **_head(pod),
                "metadata": pick(pod.get("metadata"), _POD_METADATA),
                "spec": kept,
                "status": pick(pod.get("status"), _POD_STATUS),
            }
        )
        self._share(slim["metadata"], "labels")
        self._share(slim["spec"], "containers", "initContainers", "tolerations", "affinity")
        return slim

    def node(self, node: Object) -> Object:
        """Return the parts of a node the controller reads."""
        slim: Object = compact(
            {
                **_head(node),
                "metadata": pick(node.get("metadata"), _NODE_METADATA),
                "spec": pick(node.get("spec"), _NODE_SPEC),
                "status": pick(node.get("status"), _NODE_STATUS),
            }
        )
        self._share(slim["status"], "allocatable")
        return slim

    def claim(self, claim: Object) -> Object:
        """Return the claim without ``metadata.managedFields``: all else is written back."""
        metadata = claim.get("metadata")
        if isinstance(metadata, Mapping) and "managedFields" in metadata:
            without = {k: v for k, v in metadata.items() if k != "managedFields"}
            claim = {**claim, "metadata": without}
        slim: Object = compact(claim)
        self._share(slim, "spec")
        allocation = objects.status(slim).get("allocation")
        self._share(allocation, "nodeSelector")
        devices = allocation.get("devices") if isinstance(allocation, dict) else None
        self._share(devices, "config")
        for result in (devices or {}).get("results") or ():
            self._share(result, "consumedCapacity")
        return slim
