"""Cluster actors behave like kube-controller-manager and kube-scheduler where the driver cares."""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path
from typing import Any

from gpushare_simulator.harness.cluster import FakeCluster
from harness.manifests import DEVICE_CLASS, DRIVER, INVENTORY, POD, TEMPLATE
from harness.minimal_plugin import MinimalPlugin
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.errors import NotFoundError

FINALIZER = f"{DRIVER}/allocation"


def pod_phase(core: client.CoreV1Api, name: str) -> str | None:
    return raw.call(core.read_namespaced_pod, name, "default").get("status", {}).get("phase")


def test_finished_pod_releases_deallocates_and_deletes_its_claim(work_dir: Path) -> None:
    """A succeeded pod loses its reservation; the scheduler's allocation and the claim go."""
    with FakeCluster(INVENTORY, work_dir) as cluster:
        core, resource = client.CoreV1Api(cluster.api), client.ResourceV1Api(cluster.api)
        plugin = MinimalPlugin(cluster.api, "node-a", cluster.node_dirs("node-a").root)
        plugin.publish()
        plugin.start()
        try:
            cluster.apply([DEVICE_CLASS, TEMPLATE, POD])
            cluster.wait_for(lambda: pod_phase(core, "infer") == "Running", "the pod to run")
            claims = raw.call(resource.list_namespaced_resource_claim, "default")["items"]
            (claim,) = claims
            assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
            cluster.kubelets["node-a"].complete_pod("default", "infer")

            def claim_gone() -> bool:
                try:
                    raw.call(
                        resource.read_namespaced_resource_claim,
                        claim["metadata"]["name"],
                        "default",
                    )
                except NotFoundError:
                    return True
                return False

            cluster.wait_for(claim_gone, "the finished pod's claim to be deleted")
            assert plugin.unprepared == [claim["metadata"]["uid"]]
        finally:
            plugin.stop()


def external_claim(name: str, *, timestamp: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "finalizers": [FINALIZER]},
        "spec": TEMPLATE["spec"]["spec"],
    }
    allocation: dict[str, Any] = {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": DRIVER,
                    "pool": "node-a",
                    "device": "gpu-0",
                    "shareID": str(uuid.uuid4()),
                    "consumedCapacity": {"cores": "30", "memory": "5Gi"},
                }
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
            ]
        },
    }
    if timestamp:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        allocation["allocationTimestamp"] = now
    return claim, allocation


def run_external(
    cluster: FakeCluster, *, timestamp: bool
) -> tuple[client.CoreV1Api, dict[str, Any]]:
    core, resource = client.CoreV1Api(cluster.api), client.ResourceV1Api(cluster.api)
    claim, allocation = external_claim("ext", timestamp=timestamp)
    cluster.apply([DEVICE_CLASS, claim])
    stored = raw.call(resource.read_namespaced_resource_claim, "ext", "default")
    raw.call(
        resource.replace_namespaced_resource_claim_status,
        "ext",
        "default",
        {**stored, "status": {"allocation": allocation}},
    )
    pod = {
        **POD,
        "spec": {**POD["spec"], "resourceClaims": [{"name": "gpu", "resourceClaimName": "ext"}]},
    }
    cluster.apply([pod])
    return core, resource


def test_external_allocation_without_timestamp_fails_prebind(work_dir: Path) -> None:
    """An allocation lacking allocationTimestamp keeps the pod Pending with "field is immutable"."""
    with FakeCluster(INVENTORY, work_dir) as cluster:
        core, _ = run_external(cluster, timestamp=False)

        def prebind_event() -> str | None:
            events = raw.call(core.list_namespaced_event, "default")["items"]
            return next(
                (
                    e["message"]
                    for e in events
                    if e["reason"] == "FailedScheduling" and "PreBind" in e["message"]
                ),
                None,
            )

        message = cluster.wait_for(prebind_event, "a PreBind failure event")
        assert "field is immutable" in message
        assert (
            raw.call(core.read_namespaced_pod, "infer", "default")["spec"].get("nodeName") is None
        )


def test_external_allocation_is_honoured_and_never_deallocated_by_the_actors(
    work_dir: Path,
) -> None:
    """A complete external allocation is reserved and bound, and stays after the pod goes."""
    with FakeCluster(INVENTORY, work_dir) as cluster:
        plugin = MinimalPlugin(cluster.api, "node-a", cluster.node_dirs("node-a").root)
        plugin.publish()
        plugin.start()
        try:
            core, resource = run_external(cluster, timestamp=True)
            cluster.wait_for(lambda: pod_phase(core, "infer") == "Running", "the pod to run")
            claim = raw.call(resource.read_namespaced_resource_claim, "ext", "default")
            assert claim["metadata"]["finalizers"] == [FINALIZER]
            raw.call(core.delete_namespaced_pod, "infer", "default")

            def released() -> dict[str, Any] | None:
                current = raw.call(resource.read_namespaced_resource_claim, "ext", "default")
                return None if current["status"].get("reservedFor") else current

            current = cluster.wait_for(released, "the reservation to be removed")
            assert current["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
        finally:
            plugin.stop()


def test_gated_pod_waits_until_its_gate_is_removed(work_dir: Path) -> None:
    """A pod with a scheduling gate is left alone; once the gate goes it is scheduled."""
    with FakeCluster(INVENTORY, work_dir) as cluster:
        core = client.CoreV1Api(cluster.api)
        plugin = MinimalPlugin(cluster.api, "node-a", cluster.node_dirs("node-a").root)
        plugin.publish()
        gated = {
            **POD,
            "spec": {**POD["spec"], "schedulingGates": [{"name": f"{DRIVER}/allocation"}]},
        }
        cluster.apply([DEVICE_CLASS, TEMPLATE, gated])

        def claim_generated() -> bool:
            pod = raw.call(core.read_namespaced_pod, "infer", "default")
            return bool(pod.get("status", {}).get("resourceClaimStatuses"))

        # kube-controller-manager creates claims for gated pods; the scheduler must not act.
        cluster.wait_for(claim_generated, "the claim of the gated pod")
        time.sleep(0.5)
        pod = raw.call(core.read_namespaced_pod, "infer", "default")
        assert pod["spec"].get("nodeName") is None
        claims = raw.call(
            client.ResourceV1Api(cluster.api).list_namespaced_resource_claim, "default"
        )
        assert all(not c.get("status", {}).get("allocation") for c in claims["items"])
        raw.call(
            core.patch_namespaced_pod,
            "infer",
            "default",
            {"spec": {"schedulingGates": []}},
            _content_type=raw.MERGE_PATCH,
        )

        def bound() -> str | None:
            return raw.call(core.read_namespaced_pod, "infer", "default")["spec"].get("nodeName")

        assert cluster.wait_for(bound, "the ungated pod to be bound") == "node-a"
