"""The kubelet plugin process never waits for ever on the API server.

A request whose answer never comes, or a partition of the plugin's open connections, costs
one timeout: prepare fails once and the kubelet's retry succeeds; the slice publisher's
watch is renewed and a deleted slice is written again. ``/livez`` watches the publisher, its
informer and card discovery.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.processes import ComponentProcess, start_plugin
from harness.manifests import DEVICE_CLASS, DRIVER
from kubeletplugin.test_plugin_e2e import INVENTORY, container_env, pod, template
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.client import USER_AGENT_PREFIX
from dra_driver.nvml.inventory import load_inventory

# Far above what recovering takes (a few seconds), far below "for ever".
BOUND = 30.0
SHORT_TIMEOUTS = ("--api-connect-timeout", "1", "--api-timeout", "1", "--watch-timeout", "2")
AGENT = f"{USER_AGENT_PREFIX}kubelet-plugin"


@pytest.fixture
def cluster(work_dir: Path) -> Iterator[FakeCluster]:
    inventory = work_dir / "inventory.yaml"
    inventory.write_text(INVENTORY)
    with FakeCluster(load_inventory(inventory), work_dir) as running:
        running.server.bookmark_interval = 600  # a silent watch stays silent
        running.apply([DEVICE_CLASS])
        yield running


@pytest.fixture
def metrics_port() -> int:
    import socket  # noqa: PLC0415 - only this fixture needs it

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def plugin(cluster: FakeCluster, work_dir: Path, metrics_port: int) -> Iterator[ComponentProcess]:
    process = start_plugin(
        cluster,
        "node-a",
        work_dir / "inventory.yaml",
        args=[*SHORT_TIMEOUTS, "--metrics-port", str(metrics_port)],
    )
    process.wait_ready(20)
    yield process
    assert process.terminate() == 0, process.output()


def slices(cluster: FakeCluster) -> list[str]:
    listed = raw.call(client.ResourceV1Api(cluster.api).list_resource_slice)["items"]
    return [s["metadata"]["name"] for s in listed if s["spec"]["driver"] == DRIVER]


def livez(port: int) -> str:
    url = f"http://127.0.0.1:{port}/livez?verbose"
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_prepare_and_publishing_survive_a_partition(
    cluster: FakeCluster, plugin: ComponentProcess, metrics_port: int
) -> None:
    """With every open connection silent, the next claim is prepared and a lost slice rewritten."""
    cluster.wait_for(lambda: slices(cluster), "the node's slices", BOUND)
    cluster.apply([template("share", capacity={"requests": {"cores": "30"}}), pod("p1", "share")])
    container_env(cluster, "p1")
    assert cluster.server.blackhole(AGENT) >= 2  # the slice watch and a pooled connection
    cluster.apply([pod("p2", "share")])
    env = container_env(cluster, "p2")
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    (name,) = slices(cluster)
    raw.call(client.ResourceV1Api(cluster.api).delete_resource_slice, name)
    cluster.wait_for(lambda: len(slices(cluster)) == 1, "the deleted slice written again", BOUND)
    assert "not ok" not in livez(metrics_port)


def test_a_claim_read_that_never_answers_fails_prepare_once(
    cluster: FakeCluster, plugin: ComponentProcess
) -> None:
    """The plugin's claim GET hangs once: prepare reports the timeout, the retry succeeds."""
    hang = cluster.server.faults.inject(
        verb="get", resource="resourceclaims", agent=AGENT, hang=True, times=1
    )
    cluster.apply([template("share", capacity={"requests": {"cores": "30"}}), pod("p1", "share")])
    container_env(cluster, "p1")
    assert hang.hits == 1
    assert "request timed out" in plugin.output()


def test_livez_names_every_watched_loop(plugin: ComponentProcess, metrics_port: int) -> None:
    """The plugin's /livez checks the slice publisher, its informer and card discovery."""
    body = livez(metrics_port)
    for loop in ("slice-publisher", "informer-slices-node-a", "card-discovery"):
        assert f"[+]{loop} ok" in body
