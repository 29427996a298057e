"""One real control plane for the suite: two real kubelets, the chart installed, its programs.

node-1 has one Tesla T4 and node-2 two (the built-in qgpu-runbook inventory). Each test gets
a namespace of its own; when it ends the namespace is deleted, its pods and claims must go, and
nothing of ours may be left: no claim, pod or finalizer (the leak a real API server showed:
claims stuck Terminating). The Namespace objects go in the background; the session's end checks
that every one did.
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
from realk8s.kit import CHART, GPU_LABELS, TOOLS, Cluster, fresh_namespace, namespaces_gone


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this directory needs the real binaries."""
    for item in items:
        if "realk8s" in str(item.path):
            item.add_marker(pytest.mark.realk8s)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """Yield the plane, node-1 and node-2 with their kubelets, the chart and its programs."""
    binaries = realkube.binaries("kube-controller-manager", "kube-scheduler", "klhollow")
    for tool in ("helm", "kubectl"):
        if not (TOOLS / tool).is_file():
            pytest.fail(f"{TOOLS / tool} is missing: run hack/install-tools.sh")
    # Short: the plugins' unix sockets live under it.
    work = Path(tempfile.mkdtemp(prefix="k", dir="/tmp"))
    inventory = work / "inventory.yaml"
    inventory.write_text(dump_inventory(builtin_inventory("qgpu-runbook")))
    try:
        with RealControlPlane(binaries, work, grace_s=5) as plane:
            for node in ("node-1", "node-2"):
                plane.add_node(node, GPU_LABELS)
            driver = ChartInstall(plane, TOOLS / "helm", CHART, work / "d", inventory=inventory)
            driver.install()
            driver.start_controller()
            for node in ("node-1", "node-2"):
                driver.start_plugin(node)
            resource = client.ResourceV1Api(driver.api)
            driver.wait(
                lambda: len(raw.call(resource.list_resource_slice).get("items") or []) == 2,
                "both nodes' ResourceSlices",
                60,
            )
            cluster = Cluster(plane, driver)
            try:
                yield cluster
                namespaces_gone(cluster)
            finally:
                for process in driver.processes.values():
                    process.stop(5.0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """Yield a fresh namespace; deleted after the test, leaving nothing of ours behind."""
    with fresh_namespace(cluster) as name:
        yield name
