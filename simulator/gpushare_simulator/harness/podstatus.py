"""Pod status written as Kubernetes' own components write it: the harness's, not the driver's.

The driver's components never write a pod's status; the emulated kubelet, scheduler and
resourceclaim controller, the hollow node and tests that finish a pod do.
"""

from __future__ import annotations

from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.objects import Object


def patch_pod_status(
    core: client.CoreV1Api, pod: Object, status: Object, *, if_unchanged: bool = False
) -> Object:
    """Merge-patch ``status`` into the pod's status (lists given replace lists stored).

    With ``if_unchanged`` the patch names ``pod``'s resourceVersion: a 409 if the pod moved on.
    """
    namespace, name = object_key(pod)
    body: Object = {"status": status}
    if if_unchanged:
        body["metadata"] = {"resourceVersion": pod["metadata"]["resourceVersion"]}
    return raw.call(
        core.patch_namespaced_pod_status, name, namespace, body, _content_type=raw.MERGE_PATCH
    )
