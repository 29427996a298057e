"""What the controller's informers keep of each object: the fields it reads, nothing else.

At 1,000 nodes and 20,000 pods the informers' caches are most of the controller's memory, and
most of each object is what the controller never reads: a pod's environment, command, probes,
volumes and container statuses, a node's image list and conditions, every object's
``managedFields``. These pure functions are the informers' transforms.

Pods and nodes are only ever read and patched, so they keep just what the allocator, the node
fit, affinity, spread, the release loop and event references read. Claims are written back
whole (an update sends the object it read), so they lose only ``metadata.managedFields``,
which an update that leaves the field out keeps on the server. Slices and DeviceClasses are
kept as they are: the engine reads nearly all of them, and there are few.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

Object = dict[str, Any]

_POD_METADATA: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "ownerReferences",
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
)
_CONTAINER: Final = ("name", "resources", "ports", "restartPolicy")
_POD_STATUS: Final = ("phase", "resourceClaimStatuses")
_NODE_METADATA: Final = ("name", "uid", "resourceVersion", "labels")
_NODE_SPEC: Final = ("taints", "unschedulable")
_NODE_STATUS: Final = ("allocatable",)


def _pick(source: object, keys: Iterable[str]) -> Object:
    if not isinstance(source, Mapping):
        return {}
    return {key: source[key] for key in keys if key in source}


def _head(obj: Mapping[str, Any]) -> Object:
    return _pick(obj, ("apiVersion", "kind"))


def slim_pod(pod: Object) -> Object:
    """Return the parts of a pod the controller reads."""
    spec = pod.get("spec") or {}
    kept = _pick(spec, _POD_SPEC)
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            kept[key] = [_pick(container, _CONTAINER) for container in spec[key]]
    return {
        **_head(pod),
        "metadata": _pick(pod.get("metadata"), _POD_METADATA),
        "spec": kept,
        "status": _pick(pod.get("status"), _POD_STATUS),
    }


def slim_node(node: Object) -> Object:
    """Return the parts of a node the controller reads."""
    return {
        **_head(node),
        "metadata": _pick(node.get("metadata"), _NODE_METADATA),
        "spec": _pick(node.get("spec"), _NODE_SPEC),
        "status": _pick(node.get("status"), _NODE_STATUS),
    }


def slim_claim(claim: Object) -> Object:
    """Return the claim without ``metadata.managedFields``: all else is written back."""
    metadata = claim.get("metadata")
    if not isinstance(metadata, Mapping) or "managedFields" not in metadata:
        return claim
    return {**claim, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
