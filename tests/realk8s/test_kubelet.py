"""What the real kubelet does with the plugin around a pod: prepare, health, unprepare.

The kubelet keeps a health stream open to every registered plugin and reports each prepared
device's health in the status of the containers using it (``allocatedResourcesStatus``); once
a pod is gone it unprepares its claims, and the plugin removes their CDI specs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import yaml

from dra_driver.cdi.names import spec_file_name
from realk8s.kit import NAMES, Cluster, Object, one_service, wait_for


def _health(pod: Object | None) -> list[str]:
    """Return the health of every device the pod's first container reports, as stored."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return []
    entries = statuses[0].get("allocatedResourcesStatus") or []
    return [r.get("health") for e in entries for r in e.get("resources") or []]


@contextlib.contextmanager
def _unhealthy(inventory: Path, node: str, device: str) -> Iterator[None]:
    """Mark ``node``'s card ``device`` (gpu-N: index N) unhealthy in the fake NVML; undo after."""
    original = inventory.read_text()
    cards = yaml.safe_load(original)
    index = int(device.removeprefix("gpu-"))
    for entry in cards["nodes"]:
        if entry["name"] == node:
            card = next(c for c in entry["cards"] if c["index"] == index)
            card["health"], card["healthMessage"] = "Unhealthy", "XID 79: fallen off the bus"
    inventory.write_text(yaml.safe_dump(cards, sort_keys=False))
    try:
        yield
    finally:
        inventory.write_text(original)


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
    with _unhealthy(cluster.driver.inventory, "node-2", result["device"]):
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
    # The card is back in node-2's slice, so later tests find both cards again.
    wait_for(lambda: len(_devices(cluster, "node-2")) == 2, "node-2's two cards published")
    assert pod["metadata"]["uid"] == (cluster.pod(namespace, prefix) or {})["metadata"]["uid"]


def _devices(cluster: Cluster, node: str) -> list[str]:
    """Return the devices of ``node``'s ResourceSlices."""
    slices = cluster.json("resourceslices", f"--field-selector=spec.nodeName={node}")["items"]
    return [d["name"] for s in slices for d in s["spec"].get("devices") or []]


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
