"""Pod status written as the kubelet and kube-scheduler write it: the harness's, not the driver's.

The driver's components never write a pod's status; the emulated kubelet and scheduler, the
hollow node and tests that finish a pod do.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.informer import object_key

Object = dict[str, Any]


def patch_pod_status(core: client.CoreV1Api, pod: Object, status: Object) -> Object:
    """Merge-patch ``status`` into the pod's status (lists given replace lists stored)."""
    namespace, name = object_key(pod)
    return raw.call(
        core.patch_namespaced_pod_status,
        name,
        namespace,
        {"status": status},
        _content_type=raw.MERGE_PATCH,
    )
