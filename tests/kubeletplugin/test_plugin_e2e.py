"""The kubelet plugin as a real process against the harness, through its real unix sockets."""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.processes import start_plugin
from gpushare_simulator.harness.regions import FakeProcess, FakeTask
from gpushare_simulator.simulate.cudawork import fake_task
from harness.manifests import DEVICE_CLASS, DRIVER
from kubernetes import client

from dra_driver._proto.dra.v1 import api_pb2 as dra
from dra_driver._proto.dra.v1 import api_pb2_grpc as dra_grpc
from dra_driver.api import DriverNames
from dra_driver.cdi import validate_spec
from dra_driver.k8s import raw
from dra_driver.nvml.inventory import load_inventory

GIB = 1024**3

# Two cards whose NVML index order is the reverse of their PCI bus order: limits must follow
# the bus order (the CUDA ordinal with CUDA_DEVICE_ORDER=PCI_BUS_ID), never the host index.
INVENTORY = """
nodes:
- name: node-a
  cards:
  - {uuid: GPU-aaaaaaaa-0000-4000-8000-000000000001, productName: Tesla T4, memory: 15360Mi,
     pciBusID: "0000:af:00.0", minor: 0, index: 0, architecture: Turing,
     cudaComputeCapability: "7.5", driverVersion: "550.54.15"}
  - {uuid: GPU-aaaaaaaa-0000-4000-8000-000000000002, productName: Tesla T4, memory: 15360Mi,
     pciBusID: "0000:3b:00.0", minor: 1, index: 1, architecture: Turing,
     cudaComputeCapability: "7.5", driverVersion: "550.54.15"}
- name: node-b
"""


class Plugin:
    """A running ``gpushare-dra kubelet-plugin`` process for node-a, with its gRPC endpoint."""

    def __init__(
        self, cluster: FakeCluster, inventory: Path, env: dict[str, str] | None = None
    ) -> None:
        dirs = cluster.node_dirs("node-a")
        self.plugin_dir = dirs.plugins / DRIVER
        self.cdi_root = dirs.cdi
        self.socket = self.plugin_dir / "dra.sock"
        self.component = start_plugin(cluster, "node-a", inventory, env=env)
        self.log = self.component.log

    def wait_serving(self, timeout: float = 20) -> None:
        self.component.wait_ready(timeout)

    def stub(self) -> tuple[grpc.Channel, dra_grpc.DRAPluginStub]:
        channel = grpc.insecure_channel(f"unix://{self.socket}")
        return channel, dra_grpc.DRAPluginStub(channel)

    def terminate(self) -> int:
        return self.component.terminate()

    def kill(self) -> None:
        self.component.kill()


@pytest.fixture
def inventory(work_dir: Path) -> Path:
    path = work_dir / "inventory.yaml"
    path.write_text(INVENTORY)
    return path


@pytest.fixture
def cluster(work_dir: Path, inventory: Path) -> Iterator[FakeCluster]:
    with FakeCluster(load_inventory(inventory), work_dir) as running:
        running.apply([DEVICE_CLASS])
        yield running


@pytest.fixture
def plugin(cluster: FakeCluster, inventory: Path) -> Iterator[Plugin]:
    process = Plugin(cluster, inventory)
    process.wait_serving()
    yield process
    assert process.terminate() == 0, process.log.read_text()
    assert not process.socket.exists()


def template(name: str, **exactly: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DRIVER, **exactly}}
        ]}}},
    }  # fmt: skip


def pod(name: str, template_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
            "containers": [
                {"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def container_env(cluster: FakeCluster, pod: str, container: str = "c") -> dict[str, str]:
    """Wait for the pod to run; return what its container was told."""
    core = client.CoreV1Api(cluster.api)
    cluster.wait_for(
        lambda: (
            raw.call(core.read_namespaced_pod, pod, "default")["status"].get("phase") == "Running"
        ),
        f"pod {pod} to run",
        timeout=20,
    )
    return cluster.kubelets["node-a"].containers[("default", pod, container)].env


def test_registers_and_publishes_one_device_per_card(cluster: FakeCluster, plugin: Plugin) -> None:
    """The kubelet registers the plugin and the node's slice lists both cards with capacities."""
    cluster.wait_for(lambda: DRIVER in cluster.emulated["node-a"].plugins, "registration")
    resource = client.ResourceV1Api(cluster.api)

    def slices() -> list[dict[str, Any]] | None:
        found = raw.call(resource.list_resource_slice, field_selector="spec.nodeName=node-a")[
            "items"
        ]
        return found or None

    (published,) = cluster.wait_for(slices, "the node's ResourceSlice")
    devices = {d["name"]: d for d in published["spec"]["devices"]}
    assert set(devices) == {"gpu-0", "gpu-1"}
    assert devices["gpu-1"]["attributes"]["resource.kubernetes.io/pciBusID"] == {
        "string": "0000:3b:00.0"
    }
    assert devices["gpu-0"]["capacity"]["memory"]["value"] == "15Gi"
    assert devices["gpu-0"]["allowMultipleAllocations"] is True
    assert published["spec"]["pool"]["name"] == "node-a"
    assert published["metadata"]["ownerReferences"][0]["kind"] == "Node"


def test_one_card_share_gets_its_limits(cluster: FakeCluster, plugin: Plugin) -> None:
    """A 5Gi / 30-core share runs with HAMi-core limits of 5120m and 30 on ordinal 0."""
    cluster.apply(
        [
            template("share", capacity={"requests": {"cores": "30", "memory": "5Gi"}}),
            pod("p1", "share"),
        ]
    )
    env = container_env(cluster, "p1")
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5120m"
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["GPU_CORE_UTILIZATION_POLICY"] == "default"
    assert "CUDA_DEVICE_MEMORY_LIMIT_1" not in env
    (spec_file,) = list(plugin.cdi_root.glob(f"k8s.{DRIVER}-claim_*.json"))
    assert validate_spec(json.loads(spec_file.read_text())) == []


def test_two_card_claim_keys_limits_by_pci_order(cluster: FakeCluster, plugin: Plugin) -> None:
    """With two cards, ordinal 0 is the card with the lower PCI bus ID, not host index 0."""
    cluster.apply([template("two", count=2), pod("p2", "two")])
    env = container_env(cluster, "p2")
    assert env["GPUSHARE_DEVICE_UUIDS"] == (
        "GPU-aaaaaaaa-0000-4000-8000-000000000002,GPU-aaaaaaaa-0000-4000-8000-000000000001"
    )
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "15360m"


def allocated_claim(cluster: FakeCluster, name: str, device: str) -> dict[str, Any]:
    resource = client.ResourceV1Api(cluster.api)
    spec = template("x", capacity={"requests": {"cores": "1", "memory": "128Mi"}})["spec"]["spec"]
    claim = raw.call(
        resource.create_namespaced_resource_claim,
        "default",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": spec,
        },
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    allocation = {
        "devices": {"results": [{
            "request": "gpu", "driver": DRIVER, "pool": "node-a", "device": device,
            "shareID": str(uuid.uuid4()), "consumedCapacity": {"cores": "1", "memory": "128Mi"},
        }]},
        "nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]},
        "allocationTimestamp": now,
    }  # fmt: skip
    return raw.call(
        resource.replace_namespaced_resource_claim_status,
        name,
        "default",
        {**claim, "status": {"allocation": allocation}},
    )


def test_batch_of_32_with_one_bad_claim_is_idempotent_and_unprepares(
    cluster: FakeCluster, plugin: Plugin
) -> None:
    """31 claims prepare beside a bad one, a repeat answers the same, unprepare cleans up."""
    claims = [allocated_claim(cluster, f"c{i}", f"gpu-{i % 2}") for i in range(32)]
    refs = [
        dra.Claim(namespace="default", uid=c["metadata"]["uid"], name=c["metadata"]["name"])
        for c in claims
    ]
    refs[7] = dra.Claim(namespace="default", uid=str(uuid.uuid4()), name="c7")
    channel, stub = plugin.stub()
    with channel:
        first = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=refs), timeout=30)
        again = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=refs), timeout=30)
        assert first == again
        errors = {uid: r.error for uid, r in first.claims.items() if r.error}
        assert list(errors) == [refs[7].uid]
        assert "was replaced" in errors[refs[7].uid]
        good = [r for r in refs if r.uid != refs[7].uid]
        for ref in good:
            (device,) = first.claims[ref.uid].devices
            assert device.request_names == ["gpu"]
            assert device.cdi_device_ids[0].startswith(f"k8s.{DRIVER}/claim={ref.uid}-gpu-")
            assert device.share_id
        assert len(list(plugin.cdi_root.glob("*.json"))) == 31
        result = stub.NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest(claims=refs), timeout=30
        )
        assert all(not r.error for r in result.claims.values())
    assert list(plugin.cdi_root.glob("*.json")) == []
    assert list((plugin.plugin_dir / "checkpoint").iterdir()) == []


@pytest.mark.parametrize("step", ["after-spec", "after-entry"])
def test_killed_mid_prepare_leaves_one_consistent_claim(
    cluster: FakeCluster, inventory: Path, step: str
) -> None:
    """SIGKILL at each prepare step, restart, retry: exactly one spec and one completed entry."""
    claim = allocated_claim(cluster, "crash", "gpu-0")
    ref = dra.Claim(namespace="default", uid=claim["metadata"]["uid"], name="crash")
    marker = cluster.work_dir / "paused"
    doomed = Plugin(cluster, inventory, env={"GPUSHARE_TEST_PAUSE_AT": f"{step}:{marker}"})
    doomed.wait_serving()
    channel, stub = doomed.stub()
    call = threading.Thread(
        target=lambda: _swallow(
            lambda: stub.NodePrepareResources(
                dra.NodePrepareResourcesRequest(claims=[ref]), timeout=30
            )
        ),
        daemon=True,
    )
    call.start()
    cluster.wait_for(marker.exists, f"the plugin to pause at {step}", timeout=20)
    doomed.kill()
    channel.close()
    call.join(10)
    survivor = Plugin(cluster, inventory)
    survivor.wait_serving()
    try:
        channel, stub = survivor.stub()
        with channel:
            response = stub.NodePrepareResources(
                dra.NodePrepareResourcesRequest(claims=[ref]), timeout=30
            )
        assert response.claims[ref.uid].error == ""
        specs = list(survivor.cdi_root.glob("*.json"))
        assert [p.name for p in specs] == [f"k8s.{DRIVER}-claim_{ref.uid}.json"]
        assert validate_spec(json.loads(specs[0].read_text())) == []
        entries = list((survivor.plugin_dir / "checkpoint").iterdir())
        assert [entry.name for entry in entries] == [f"{ref.uid}.json"]
        (recorded,) = json.loads(entries[0].read_text())["claims"]
        assert recorded["state"] == "PrepareCompleted"
        leftovers = [p.name for p in survivor.cdi_root.iterdir() if not p.name.endswith(".json")]
        assert leftovers == []
    finally:
        assert survivor.terminate() == 0, survivor.log.read_text()


def _swallow(call: Any) -> None:
    with contextlib.suppress(grpc.RpcError):  # the server is killed mid-call: that is the point
        call()


# -- each container is told its own shares (the runtime's CDI injection rules) --------------


def two_request_template() -> dict[str, Any]:
    """One claim asking for a 40-core 8Gi share (request a) and a 10-core 2Gi one (b)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": DRIVER,
                                      "capacity": {"requests": {"cores": "40", "memory": "8Gi"}}}},
            {"name": "b", "exactly": {"deviceClassName": DRIVER,
                                      "capacity": {"requests": {"cores": "10", "memory": "2Gi"}}}},
        ]}}},
    }  # fmt: skip


def pod_per_request(name: str) -> dict[str, Any]:
    containers = [
        {"name": r, "image": "cuda", "resources": {"claims": [{"name": "gpus", "request": r}]}}
        for r in ("a", "b")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two"}],
            "containers": containers,
        },
    }


def test_a_container_per_request_is_told_its_own_request_only(
    cluster: FakeCluster, plugin: Plugin
) -> None:
    """Container a gets 8192m/40, container b 2048m/10, each on ordinal 0, each its region."""
    cluster.apply([two_request_template(), pod_per_request("p")])
    a, b = container_env(cluster, "p", "a"), container_env(cluster, "p", "b")
    assert (a["CUDA_DEVICE_MEMORY_LIMIT_0"], a["CUDA_DEVICE_SM_LIMIT_0"]) == ("8192m", "40")
    assert (b["CUDA_DEVICE_MEMORY_LIMIT_0"], b["CUDA_DEVICE_SM_LIMIT_0"]) == ("2048m", "10")
    assert "CUDA_DEVICE_MEMORY_LIMIT_1" not in a
    assert "CUDA_DEVICE_MEMORY_LIMIT_1" not in b
    assert a["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/cache/a.cache"
    assert b["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/cache/b.cache"
    assert (a["GPUSHARE_REQUEST"], b["GPUSHARE_REQUEST"]) == ("a", "b")
    # Claim-wide items reach both, once each.
    assert a["NVIDIA_VISIBLE_DEVICES"] == b["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert a["GPUSHARE_CLAIM_UID"] == b["GPUSHARE_CLAIM_UID"]
    kubelet = cluster.emulated["node-a"]
    nodes_a = [n["path"] for n in kubelet.containers[("default", "p", "a")].device_nodes]
    nodes_b = [n["path"] for n in kubelet.containers[("default", "p", "b")].device_nodes]
    # Each container sees the card of its own request (and the control nodes), not the other's.
    assert [n for n in nodes_a if n[-1].isdigit()] != [] != [n for n in nodes_b if n[-1].isdigit()]


# -- the node monitor in the plugin process: held while online is busy, released on exit ----


def priority_template(name: str, priority: str) -> dict[str, Any]:
    """Return a template for a 30-core 2Gi share of the given priority."""
    names = DriverNames.for_driver(DRIVER)
    body = template(name, capacity={"requests": {"cores": "30", "memory": "2Gi"}})
    parameters = {"apiVersion": names.config_api_version, "kind": names.config_kind,
                  "priority": priority}  # fmt: skip
    body["spec"]["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": parameters}}
    ]
    return body


def region_of(cluster: FakeCluster, pod_name: str) -> FakeTask:
    """Create the region the pod's container would write, where its CDI mount puts it."""
    container_env(cluster, pod_name)
    edits = cluster.kubelets["node-a"].containers[("default", pod_name, "c")]
    task, _ = fake_task(edits.env, edits.mounts)
    return task


def test_the_monitor_holds_offline_work_and_never_leaves_it_held_when_it_goes(
    cluster: FakeCluster, inventory: Path
) -> None:
    """Held while online is busy; SIGTERM resumes it; after SIGKILL the next plugin lifts it."""
    env = {"MONITOR_PERIOD": "0.2"}
    plugin = Plugin(cluster, inventory, env=env)
    plugin.wait_serving()
    cluster.apply([
        priority_template("online", "online"), priority_template("offline", "offline"),
        pod("on", "online"), pod("off", "offline"),
    ])  # fmt: skip
    online, offline = region_of(cluster, "on"), region_of(cluster, "off")
    assert (
        container_env(cluster, "on")["GPUSHARE_DEVICE_UUIDS"]
        == (container_env(cluster, "off")["GPUSHARE_DEVICE_UUIDS"])
    )
    online.set_processes([FakeProcess(1, 1001, [GIB], [30])])  # busy: its SM use says so
    offline.launch()
    cluster.wait_for(lambda: offline.suspended, "offline work to be held", timeout=10)
    assert plugin.terminate() == 0, plugin.log.read_text()
    assert not offline.suspended
    assert (online.utilization_switch, offline.utilization_switch) == (1, 1)

    plugin = Plugin(cluster, inventory, env=env)  # the claims are still prepared
    plugin.wait_serving()
    cluster.wait_for(lambda: offline.suspended, "offline work to be held again", timeout=10)
    plugin.kill()  # no handler runs: the hold stays in the region
    online.set_processes([FakeProcess(1, 1001, [GIB], [0])])  # online work ends meanwhile
    assert offline.suspended
    plugin = Plugin(cluster, inventory, env=env)
    plugin.wait_serving()
    try:
        cluster.wait_for(lambda: not offline.suspended, "the hold to be lifted", timeout=5)
    finally:
        assert plugin.terminate() == 0, plugin.log.read_text()


# -- an API server without DRAConsumableCapacity: plain devices, sized by GpuShareConfig -----


def test_a_plain_card_on_1_35_is_held_to_the_configs_size(work_dir: Path, inventory: Path) -> None:
    """On 1.35 the card is a plain device and the allocation has no consumedCapacity: 30 / 5Gi."""
    names = DriverNames.for_driver(DRIVER)
    parameters = {"apiVersion": names.config_api_version, "kind": names.config_kind}
    sized = template("sized")
    sized["spec"]["spec"]["devices"]["config"] = [
        {"opaque": {"driver": DRIVER, "parameters": {**parameters, "cores": 30, "memory": "5Gi"}}}
    ]
    with FakeCluster(load_inventory(inventory), work_dir, kube_version="1.35") as cluster:
        cluster.apply([DEVICE_CLASS])
        plugin = Plugin(cluster, inventory)
        try:
            plugin.wait_serving()
            cluster.apply([sized, pod("p1", "sized")])
            env = container_env(cluster, "p1")
            claim = raw.call(
                client.ResourceV1Api(cluster.api).list_namespaced_resource_claim, "default"
            )["items"][0]
        finally:
            assert plugin.terminate() == 0, plugin.log.read_text()
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert "consumedCapacity" not in result
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5120m"


def test_a_prepared_claim_says_in_its_status_what_its_containers_got(
    cluster: FakeCluster, plugin: Plugin
) -> None:
    """status.devices of a prepared share: its card, 30 cores, 5Gi, isolation, Ready."""
    cluster.apply(
        [
            template("described", capacity={"requests": {"cores": "30", "memory": "5Gi"}}),
            pod("p-status", "described"),
        ]
    )
    container_env(cluster, "p-status")
    resource = client.ResourceV1Api(cluster.api)

    def described() -> dict[str, Any] | None:
        claims = raw.call(resource.list_namespaced_resource_claim, "default")["items"]
        mine = [c for c in claims if c["metadata"]["name"].startswith("p-status")]
        return mine[0] if mine and (mine[0].get("status") or {}).get("devices") else None

    claim = cluster.wait_for(described, "the claim's status.devices")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    (entry,) = claim["status"]["devices"]
    assert (entry["driver"], entry["pool"], entry["device"], entry["shareID"]) == (
        DRIVER, "node-a", result["device"], result["shareID"],
    )  # fmt: skip
    assert entry["data"]["cores"] == 30
    assert entry["data"]["memory"] == "5Gi"
    assert entry["data"]["isolation"] == "burst-share"
    assert entry["data"]["backend"] == "hami-core"
    assert entry["data"]["uuid"].startswith("GPU-")
    (ready,) = entry["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
