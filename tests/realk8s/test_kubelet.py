"""What the real kubelet does with the plugin around a pod: prepare, health, unprepare.

The kubelet keeps a health stream open to every registered plugin and reports each prepared
device's health in the status of the containers using it (``allocatedResourcesStatus``); once
a pod is gone it unprepares its claims, and the plugin removes their CDI specs.
"""

from __future__ import annotations

from dra_driver.cdi.names import spec_file_name
from realk8s.kit import NAMES, Cluster, Object, one_service, unhealthy, wait_for


def _health(pod: Object | None) -> list[str]:
    """Return the health of every device the pod's first container reports, as stored."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return []
    entries = statuses[0].get("allocatedResourcesStatus") or []
    return [r.get("health") for e in entries for r in e.get("resources") or []]


def test_a_card_turning_unhealthy_reaches_the_pods_container_status(
    cluster: Cluster, namespace: str
) -> None:
    """The kubelet shows the share Healthy, Unhealthy once its card fails, Healthy when back."""
    prefix = one_service(cluster, namespace, "node-2")
    pod = cluster.wait(lambda: cluster.running(namespace, prefix), f"{prefix} to run", namespace)
    cluster.wait(
        lambda: _health(cluster.running(namespace, prefix)) == ["Healthy"],
        "the kubelet to report the share Healthy",
        namespace,
    )
    (claim,) = cluster.claims(namespace)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    with unhealthy(cluster.driver.inventory, "node-2", result["device"]):
        cluster.wait(
            lambda: _health(cluster.pod(namespace, prefix)) == ["Unhealthy"],
            "the kubelet to report the share Unhealthy",
            namespace,
        )
    cluster.wait(
        lambda: _health(cluster.pod(namespace, prefix)) == ["Healthy"],
        "the kubelet to report the share Healthy again",
        namespace,
    )
    # The card's taint is gone from node-2's slice, so later tests find both cards usable.
    wait_for(lambda: _untainted(cluster, "node-2") == 2, "node-2's two cards untainted")
    assert pod["metadata"]["uid"] == (cluster.pod(namespace, prefix) or {})["metadata"]["uid"]


def _untainted(cluster: Cluster, node: str) -> int:
    """Return how many devices of ``node``'s ResourceSlices carry no taint."""
    slices = cluster.json("resourceslices", f"--field-selector=spec.nodeName={node}")["items"]
    return sum(not d.get("taints") for s in slices for d in s["spec"].get("devices") or [])


def test_the_kubelet_unprepares_a_claim_once_its_pod_is_gone(
    cluster: Cluster, namespace: str
) -> None:
    """The claim's CDI spec exists while its pod runs and is removed after the pod is deleted."""
    prefix = one_service(cluster, namespace, "node-1")
    cluster.wait(lambda: cluster.running(namespace, prefix), f"{prefix} to run", namespace)
    (claim,) = cluster.claims(namespace)
    spec = cluster.plane.nodes["node-1"].cdi_root / spec_file_name(NAMES, claim["metadata"]["uid"])
    assert spec.is_file()
    cluster.kubectl("delete", "-n", namespace, "deployment", prefix, "--wait=true")
    wait_for(lambda: not spec.exists(), f"{spec.name} to be removed by NodeUnprepareResources")
