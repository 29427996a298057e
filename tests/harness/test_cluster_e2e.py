"""End to end on the harness: a pod from a template goes from Pending to prepared and back."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.kubebin import KubeBinaries
from harness.manifests import DEVICE_CLASS, DRIVER, INVENTORY, POD, TEMPLATE
from harness.minimal_plugin import MinimalPlugin
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.errors import NotFoundError


def test_template_pod_is_allocated_bound_prepared_and_cleaned_up(
    work_dir: Path, kube_binaries: KubeBinaries | None
) -> None:
    """Pending pod, claim from template, first-fit allocation, bound, prepared, cleaned up."""
    with FakeCluster(INVENTORY, work_dir, binaries=kube_binaries) as cluster:
        core, resource = client.CoreV1Api(cluster.api), client.ResourceV1Api(cluster.api)
        plugin = MinimalPlugin(cluster.api, "node-a", cluster.node_dirs("node-a").root)
        plugin.publish()
        plugin.start()
        try:
            assert plugin.registered.wait(5), "the kubelet never registered the plugin"
            cluster.apply([DEVICE_CLASS, TEMPLATE, POD])

            def claim_name() -> str | None:
                pod = raw.call(core.read_namespaced_pod, "infer", "default")
                statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
                return statuses[0]["resourceClaimName"] if statuses else None

            name = cluster.wait_for(claim_name, "the claim to be generated from the template")
            claim = raw.call(resource.read_namespaced_resource_claim, name, "default")
            assert claim["metadata"]["ownerReferences"][0]["name"] == "infer"

            def running() -> dict[str, Any] | None:
                pod = raw.call(core.read_namespaced_pod, "infer", "default")
                return pod if pod.get("status", {}).get("phase") == "Running" else None

            pod = cluster.wait_for(running, "the pod to run")
            claim = raw.call(resource.read_namespaced_resource_claim, name, "default")
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert (result["pool"], result["device"]) == ("node-a", "gpu-0")
            assert result["consumedCapacity"] == {"cores": "30", "memory": "5Gi"}
            assert claim["status"]["allocation"]["allocationTimestamp"]
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
            assert pod["spec"]["nodeName"] == "node-a"
            edits = cluster.kubelets["node-a"].containers[("default", "infer", "server")]
            assert edits.env == {
                "TEST_CLAIM_UID": claim["metadata"]["uid"],
                "TEST_DEVICE": "gpu-0",
                "TEST_MEMORY": "5Gi",
            }
            assert plugin.prepared == [claim["metadata"]["uid"]]

            raw.call(core.delete_namespaced_pod, "infer", "default")
            cluster.wait_for(lambda: plugin.unprepared == [claim["metadata"]["uid"]], "unprepare")

            def claim_gone() -> bool:
                try:
                    raw.call(resource.read_namespaced_resource_claim, name, "default")
                except NotFoundError:
                    return True
                return False

            cluster.wait_for(claim_gone, "the generated claim to be deleted")
            assert list(plugin.cdi_root.iterdir()) == []
        finally:
            plugin.stop()


def test_pod_without_a_fitting_device_stays_pending_with_a_reason(
    work_dir: Path, kube_binaries: KubeBinaries | None
) -> None:
    """A request larger than any card keeps the pod Pending with the scheduler's reason."""
    big = {**TEMPLATE, "metadata": {"name": "share-5g"}}
    big["spec"] = {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "capacity": {"requests": {"memory": "64Gi"}},
                        },
                    }
                ]
            }
        }
    }
    with FakeCluster(INVENTORY, work_dir, binaries=kube_binaries) as cluster:
        core = client.CoreV1Api(cluster.api)
        plugin = MinimalPlugin(cluster.api, "node-a", cluster.node_dirs("node-a").root)
        plugin.publish()
        cluster.apply([DEVICE_CLASS, big, POD])

        def unschedulable() -> str | None:
            pod = raw.call(core.read_namespaced_pod, "infer", "default")
            for condition in pod.get("status", {}).get("conditions") or []:
                if condition["type"] == "PodScheduled" and condition["status"] == "False":
                    return str(condition["message"])
            return None

        message = cluster.wait_for(unschedulable, "the pod to be reported unschedulable")
        assert message.startswith("0/2 nodes are available: 2 cannot allocate all claims")
        assert (
            raw.call(core.read_namespaced_pod, "infer", "default")["spec"].get("nodeName") is None
        )


def test_cluster_starts_and_stops_quickly_without_leaks(work_dir: Path) -> None:
    """A two-node cluster starts and stops in under 2 s and leaves no thread behind."""
    before = set(threading.enumerate())
    started = time.monotonic()
    with FakeCluster(INVENTORY, work_dir) as cluster:
        assert len(raw.call(client.CoreV1Api(cluster.api).list_node)["items"]) == 2
    elapsed = time.monotonic() - started
    leaked = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert elapsed < 2.0
    assert leaked == []
