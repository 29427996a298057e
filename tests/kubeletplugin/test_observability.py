"""The plugin says its sharing mode: a line of /readyz and the consumable-capacity gauge."""

from __future__ import annotations

import math
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.processes import start_plugin
from harness.manifests import DEVICE_CLASS
from kubeletplugin.test_plugin_e2e import INVENTORY
from prometheus_client import CollectorRegistry

from dra_driver.kubeletplugin.metrics import PluginMetrics
from dra_driver.kubeletplugin.slicefeatures import sharing_mode
from dra_driver.metrics import ObservabilityServer
from dra_driver.nvml.inventory import load_inventory

PLAIN = (
    "sharing: plain-devices (the API server has no DRAConsumableCapacity; the controller "
    "shares cards by GpuShareConfig cores/memory)\n"
)
SHAREABLE = "sharing: consumable-capacity (cards are shared by capacity requests)\n"


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


class Node:
    """What the server reads at each request: the publisher's verdict and a readiness check."""

    def __init__(self) -> None:
        self.supported: bool | None = None
        self.problem: str | None = "ResourceSlices not published yet"


@pytest.fixture
def node() -> Node:
    return Node()


@pytest.fixture
def port(node: Node) -> Iterator[int]:
    server = ObservabilityServer(
        CollectorRegistry(),
        component="kubelet-plugin",
        status=lambda: f"sharing: {sharing_mode(node.supported)}",
        host="127.0.0.1",
        liveness={"loop": lambda: None},
        readiness={"slices": lambda: node.problem},
    )
    server.start()
    try:
        yield server.port
    finally:
        server.stop()


def test_readyz_opens_with_the_mode_and_keeps_its_status_codes(node: Node, port: int) -> None:
    """Failing: 503 with the mode and the reason; passing: 200 with the mode, then ok."""
    assert get(port, "/readyz") == (
        503,
        "sharing: not known yet (no card published)\n"
        "[-]slices failed: ResourceSlices not published yet\nnot ok\n",
    )
    node.supported, node.problem = False, None
    assert get(port, "/readyz") == (200, PLAIN + "ok\n")
    node.supported = True
    assert get(port, "/readyz?verbose") == (200, SHAREABLE + "[+]slices ok\nok\n")


def test_only_readyz_gains_the_line(node: Node, port: int) -> None:
    """/livez and /metrics answer as the shared server does, without the sharing line."""
    node.supported = False
    assert get(port, "/livez") == (200, "ok\n")
    status, body = get(port, "/metrics")
    assert status == 200
    assert "sharing:" not in body
    assert (
        'gpushare_probe_check_ok{check="slices",component="kubelet-plugin",probe="readyz"} 0.0'
        in body
    )


def test_the_gauge_is_unknown_until_the_publisher_tells() -> None:
    """NaN before the first publish (so the alert's == 0 holds no node without cards), then 1/0."""
    registry = CollectorRegistry()
    metrics = PluginMetrics(registry)
    name = "gpushare_consumable_capacity_supported"
    value = registry.get_sample_value(name)
    assert value is not None
    assert math.isnan(value)
    metrics.set_consumable_capacity(True)
    assert registry.get_sample_value(name) == 1
    metrics.set_consumable_capacity(False)
    assert registry.get_sample_value(name) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("version", "line", "gauge"),
    [("1.36", SHAREABLE, "1.0"), ("1.35", PLAIN, "0.0")],
    ids=["gate-on", "gate-off"],
)
def test_the_plugin_process_reports_its_api_servers_mode(
    work_dir: Path, version: str, line: str, gauge: str
) -> None:
    """A real plugin process: /readyz names the mode its API server allows, the gauge agrees."""
    inventory = work_dir / "inventory.yaml"
    inventory.write_text(INVENTORY)
    port = free_port()
    with FakeCluster(load_inventory(inventory), work_dir, kube_version=version) as cluster:
        cluster.apply([DEVICE_CLASS])
        plugin = start_plugin(
            cluster, "node-a", inventory, args=["--backend", "none", "--metrics-port", str(port)]
        )
        try:
            plugin.wait_ready(20)
            cluster.wait_for(lambda: get(port, "/readyz")[0] == 200, "the plugin to be ready")
            assert get(port, "/readyz") == (200, line + "ok\n")
            metrics = get(port, "/metrics")[1].splitlines()
            assert f"gpushare_consumable_capacity_supported {gauge}" in metrics
        finally:
            assert plugin.terminate() == 0, plugin.output()
