"""A cluster's life with the driver, on a plane of its own: 1.35, the upgrade, the uninstall.

It starts as Kubernetes 1.34/1.35 ships (DRAConsumableCapacity off, from an empty etcd: the
sharing fields never existed), where cards are published whole and shares are sized by the
GpuShareConfig's cores and memory. Then the gate goes on across the control plane (an
upgrade, same etcd), and capacity requests work beside the shares made before. Last the chart
is uninstalled with claims still allocated and a pod still gated, and its post-delete hook,
``gpushare-dra cleanup``, run from the hook Job's own pod, removes every mark of ours. Pods
still running on the driver's claims then cannot finish terminating (docs/uninstall.md).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import realkube
from gpushare_simulator.harness.chartinstall import ChartInstall
from gpushare_simulator.harness.controlplane import RealControlPlane
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.nvml.inventory import builtin_inventory, dump_inventory
from realk8s.kit import CHART, GPU_LABELS, TOOLS, Cluster, wait_for

NAMESPACE = "life"
GATE = "DRAConsumableCapacity"


def _share(name: str, *, config: str = "", capacity: str = "") -> str:
    """Return a template and a pod on node-1: sized by ``config`` or by ``capacity``."""
    parameters = f", {config}" if config else ""
    request = f", capacity: {{requests: {{{capacity}}}}}" if capacity else ""
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}}}
spec:
  spec:
    devices:
      requests:
      - {{name: gpu, exactly: {{deviceClassName: gpushare.dra.dev{request}}}}}
      config:
      - requests: [gpu]
        opaque:
          driver: gpushare.dra.dev
          parameters: {{apiVersion: gpushare.dra.dev/v1alpha1, kind: GpuShareConfig{parameters}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeSelector: {{kubernetes.io/hostname: node-1}}
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: {name}}}]
  containers:
  - {{name: c, image: busybox, resources: {{claims: [{{name: gpu}}]}}}}
"""


@pytest.fixture
def old_cluster() -> Iterator[Cluster]:
    """Yield a 1.35-like plane from an empty etcd, node-1 with its kubelet, the chart running."""
    binaries = realkube.binaries("kube-controller-manager", "kube-scheduler", "klhollow")
    work = Path(tempfile.mkdtemp(prefix="k", dir="/tmp"))
    inventory = work / "inventory.yaml"
    inventory.write_text(dump_inventory(builtin_inventory("qgpu-runbook")))
    try:
        with RealControlPlane(binaries, work, extra_gates={GATE: False}, grace_s=5) as plane:
            plane.add_node("node-1", GPU_LABELS)
            # A 1.35 API server serves no MutatingAdmissionPolicy v1: `auto` picks the webhook.
            webhook_gate = {"gate": {"mode": "webhook"}}
            driver = ChartInstall(
                plane, TOOLS / "helm", CHART, work / "d", inventory=inventory, values=webhook_gate
            )
            driver.install()
            driver.start_controller()
            driver.start_plugin("node-1")
            resource = client.ResourceV1Api(driver.api)
            driver.wait(lambda: raw.call(resource.list_resource_slice).get("items"), "a slice", 60)
            yield Cluster(plane, driver)
            for process in driver.processes.values():
                process.stop(5.0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _env(cluster: Cluster, name: str) -> dict[str, str]:
    pod = cluster.wait(lambda: cluster.running(NAMESPACE, name), f"{name} to run", NAMESPACE, 60)
    return cluster.env(pod, "c")


def test_from_135_through_the_upgrade_to_uninstall_and_cleanup(old_cluster: Cluster) -> None:
    """Config-sized shares on 1.35, capacity requests after the upgrade, nothing left after."""
    cluster = old_cluster
    cluster.kubectl("create", "namespace", NAMESPACE)
    apply = lambda text: cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=text)  # noqa: E731
    # 1.35: the card is published whole; two shares sized by their configs run on it.
    (device,) = cluster.json("resourceslices")["items"][0]["spec"]["devices"]
    assert "allowMultipleAllocations" not in device
    apply(_share("a", config="cores: 40, memory: 5Gi"))
    apply(_share("b", config="cores: 30, memory: 5Gi"))
    a, b = _env(cluster, "a"), _env(cluster, "b")
    assert (a["CUDA_DEVICE_SM_LIMIT_0"], a["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("40", "5120m")
    assert (b["CUDA_DEVICE_SM_LIMIT_0"], b["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("30", "5120m")
    assert a["GPUSHARE_DEVICE_UUIDS"] == b["GPUSHARE_DEVICE_UUIDS"]

    # The upgrade: the gate on in the API server, scheduler and controller manager, then the
    # driver's pods restarted as a rolling update would.
    cluster.plane.extra_gates = {}
    cluster.plane.restart(("kube-apiserver", "kube-controller-manager", "kube-scheduler"))
    cluster.driver.restart()
    wait_for(
        lambda: cluster.json("resourceslices")["items"][0]["spec"]["devices"][0].get(
            "allowMultipleAllocations"
        ),
        "the card to be published shareable",
        60,
    )
    apply(_share("c", capacity='cores: "20", memory: 2Gi'))
    c = _env(cluster, "c")
    assert (c["CUDA_DEVICE_SM_LIMIT_0"], c["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("20", "2048m")
    assert c["GPUSHARE_DEVICE_UUIDS"] == a["GPUSHARE_DEVICE_UUIDS"]
    assert cluster.running(NAMESPACE, "a") is not None  # the shares from before run on

    # A pod that cannot fit stays gated; then the chart goes, its programs with it.
    apply(_share("d", capacity='cores: "50"'))
    wait_for(lambda: cluster.events(NAMESPACE, "d"), "d's reason to wait")
    cluster.driver.uninstall()
    left = cluster.ours_left()
    assert any(item.startswith("claim ") for item in left)
    assert f"pod {NAMESPACE}/d" in left

    # The post-delete hook, as Helm runs it: its objects, its Job's pod, its program here.
    cluster.driver.applier.create(cluster.driver.hooks("post-delete"), cluster.driver.namespace)
    job_pod = cluster.driver.pod("cleanup")
    cleanup = cluster.driver.run("cleanup", job_pod, job_pod["spec"]["nodeName"], {})
    assert cleanup.process.wait(timeout=120) == 0, cleanup.tail()
    assert cluster.ours_left() == []
    # Pods that still run on the driver's claims cannot finish terminating: the kubelet must
    # unprepare their claims and no plugin of the driver serves the node any more.
    cluster.kubectl("delete", "-n", NAMESPACE, "pod", "a", "--wait=false")
    log = cluster.plane.nodes["node-1"].log_path
    wait_for(
        lambda: "DRA driver gpushare.dra.dev is not registered" in log.read_text(errors="replace"),
        "the kubelet to fail unpreparing a's claim",
    )
    assert cluster.pod(NAMESPACE, "a") is not None
    # Force deletion is what is left once the driver is gone; then nothing of ours remains.
    cluster.kubectl("delete", "-n", NAMESPACE, "pods", "--all", "--force", "--grace-period=0")
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
    core = client.CoreV1Api(cluster.api)
    wait_for(
        lambda: (
            NAMESPACE not in [n["metadata"]["name"] for n in raw.call(core.list_namespace)["items"]]
        ),
        "the namespace to go",
        60,
    )
    assert cluster.ours_left() == []
