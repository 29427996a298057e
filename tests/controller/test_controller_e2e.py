"""The controller on the harness: gated pods allocated, ungated, bound and released; faults."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from controller.kit import NAMES, node, slices_of
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.podstatus import patch_pod_status
from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.api.classes import default_device_classes
from dra_driver.controller.app import COMPONENT, Controller
from dra_driver.controller.settings import ControllerSettings
from dra_driver.k8s import objects, raw
from dra_driver.k8s.quantity import parse_quantity
from dra_driver.nvml.inventory import Inventory
from dra_driver.structured.allocated import AllocatedState

Object = dict[str, Any]
GATE = NAMES.scheduling_gate


def template(name: str, cores: str | None = None, memory: str | None = None) -> Object:
    """Return a ResourceClaimTemplate for one share of the default class."""
    exactly: Object = {"deviceClassName": NAMES.default_device_class}
    capacity = {k: v for k, v in (("cores", cores), ("memory", memory)) if v}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def gated_pod(name: str, template_name: str, *, gated: bool = True) -> Object:
    """Return a pod with a claim from ``template_name`` and our gate (as the webhook adds it)."""
    spec: Object = {
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
    }
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@contextmanager
def harness(work_dir: Path, *inventory_nodes: Any) -> Iterator[FakeCluster]:
    """Start a fake cluster with published slices and the chart's classes, no kubelets."""
    inventory = Inventory(nodes=tuple(inventory_nodes))
    with FakeCluster(inventory, work_dir, kubelets=False) as cluster:
        cluster.apply([*default_device_classes(NAMES), *slices_of(inventory.nodes)])
        yield cluster


@contextmanager
def running(cluster: FakeCluster, **settings: Any) -> Iterator[Controller]:
    """Run one controller replica against the cluster."""
    values = {"leader_elect": False, "resync_seconds": 1.0, **settings}
    controller = Controller(cluster.api, NAMES, ControllerSettings(**values), CollectorRegistry())
    controller.start()
    try:
        yield controller
    finally:
        controller.stop()


def read_pod(cluster: FakeCluster, name: str) -> Object:
    """Read a pod."""
    return raw.call(client.CoreV1Api(cluster.api).read_namespaced_pod, name, "default")


def claims(cluster: FakeCluster) -> list[Object]:
    """List every claim."""
    body = raw.call(client.ResourceV1Api(cluster.api).list_resource_claim_for_all_namespaces)
    return list(body.get("items") or [])


def bound(cluster: FakeCluster, name: str) -> Object | None:
    """Return the pod once it has a node, else None."""
    pod = read_pod(cluster, name)
    return pod if pod["spec"].get("nodeName") else None


def events_for(cluster: FakeCluster, name: str) -> list[Object]:
    """List the events about an object."""
    body = raw.call(client.CoreV1Api(cluster.api).list_namespaced_event, "default")
    return [e for e in body.get("items") or [] if e["involvedObject"]["name"] == name]


def assert_no_overcommit(all_claims: list[Object]) -> None:
    """Every card's consumed capacity fits, and no claim was allocated twice."""
    used: dict[tuple[str, str], dict[str, Fraction]] = {}
    shares: set[str] = set()
    for claim in all_claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        for result in allocation["devices"]["results"]:
            assert result["shareID"] not in shares
            shares.add(result["shareID"])
            totals = used.setdefault((result["pool"], result["device"]), {})
            for name, value in result["consumedCapacity"].items():
                totals[name] = totals.get(name, Fraction(0)) + parse_quantity(value)
    for device, totals in used.items():
        assert totals["cores"] <= 100, device
        assert totals["memory"] <= parse_quantity("16Gi"), device


def test_gated_pod_is_allocated_ungated_and_bound(work_dir: Path) -> None:
    """A gated pod's claim gets our finalizer and an allocation; the gate goes; no event is sent."""
    with harness(work_dir, node("node-a", 2)) as cluster:
        with running(cluster):
            cluster.apply([template("share", "30", "5Gi"), gated_pod("p", "share")])
            pod = cluster.wait_for(lambda: bound(cluster, "p"), "the pod to be bound")
            assert pod["spec"]["nodeName"] == "node-a"
            assert not objects.has_scheduling_gate(pod, GATE)
            (claim,) = claims(cluster)
            assert NAMES.finalizer in claim["metadata"]["finalizers"]
            allocation = claim["status"]["allocation"]
            assert allocation["allocationTimestamp"]
            (result,) = allocation["devices"]["results"]
            assert result["consumedCapacity"] == {"cores": "30", "memory": "5Gi"}
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        # Stopped, the controller has sent every event it queued. Success sends none: the
        # claim's status is the record, as for kube-scheduler's own allocations.
        ours = [e for e in events_for(cluster, "p") if e.get("reportingComponent") == COMPONENT]
        assert ours == []


def test_a_pod_another_gate_holds_is_allocated_only_once_that_gate_is_gone(
    work_dir: Path,
) -> None:
    """A queue's gate first: no allocation, a Normal event naming it; removed: allocated, bound."""
    queue = "kueue.x-k8s.io/admission"
    with harness(work_dir, node("node-a", 2)) as cluster, running(cluster):
        pod = gated_pod("p", "share")
        pod["spec"]["schedulingGates"].insert(0, {"name": queue})
        cluster.apply([template("share", "30", "5Gi"), pod])
        waiting = cluster.wait_for(
            lambda: (
                [e for e in events_for(cluster, "p") if e["reason"] == "WaitingForSchedulingGates"]
                or None
            ),
            "the controller to say what the pod waits for",
        )
        assert (waiting[0]["type"], waiting[0]["message"]) == (
            "Normal",
            f"waiting for the pod's other scheduling gates: {queue}",
        )
        deadline = time.monotonic() + 1.0  # time enough for the controller to act, if it would
        while time.monotonic() < deadline:
            assert [c for c in claims(cluster) if (c.get("status") or {}).get("allocation")] == []
            assert bound(cluster, "p") is None
            time.sleep(0.05)
        core = client.CoreV1Api(cluster.api)
        admitted = [{"op": "remove", "path": "/spec/schedulingGates/0"}]
        raw.call(core.patch_namespaced_pod, "p", "default", admitted, _content_type=raw.JSON_PATCH)
        done = cluster.wait_for(lambda: bound(cluster, "p"), "the pod to be bound once admitted")
        assert not done["spec"].get("schedulingGates")


def test_finished_pod_releases_its_claim(work_dir: Path) -> None:
    """When the pod ends, the allocation is cleared and our finalizer removed, so the claim goes."""
    with harness(work_dir, node("node-a", 1)) as cluster, running(cluster):
        cluster.apply([template("whole"), gated_pod("first", "whole")])
        pod = cluster.wait_for(lambda: bound(cluster, "first"), "the first pod to be bound")
        cluster.apply([gated_pod("second", "whole")])
        cluster.wait_for(
            lambda: any(e["reason"] == "FailedAllocation" for e in events_for(cluster, "second")),
            "the second pod's FailedAllocation event",
        )
        assert objects.has_scheduling_gate(read_pod(cluster, "second"), GATE)
        patch_pod_status(client.CoreV1Api(cluster.api), pod, {"phase": "Succeeded"})
        second = cluster.wait_for(lambda: bound(cluster, "second"), "the second pod to be bound")
        assert second["spec"]["nodeName"] == "node-a"
        cluster.wait_for(lambda: len(claims(cluster)) == 1, "the first claim to be deleted")


def test_scheduler_allocated_claims_are_counted_and_untouched(work_dir: Path) -> None:
    """A claim kube-scheduler allocated (ungated pod) is counted, and never gets our finalizer."""
    with harness(work_dir, node("node-a", 1)) as cluster, running(cluster):
        cluster.apply([template("whole"), gated_pod("stock", "whole", gated=False)])
        cluster.wait_for(lambda: bound(cluster, "stock"), "the stock-scheduled pod")
        cluster.apply([gated_pod("ours", "whole")])
        cluster.wait_for(
            lambda: any(e["reason"] == "FailedAllocation" for e in events_for(cluster, "ours")),
            "FailedAllocation for our pod",
        )
        stock = next(
            c for c in claims(cluster) if c["metadata"]["ownerReferences"][0]["name"] == "stock"
        )
        assert NAMES.finalizer not in stock["metadata"]["finalizers"]
        assert_no_overcommit(claims(cluster))


def tentative(cluster: FakeCluster) -> Object | None:
    """Return the one claim once it is allocated without our finalizer (not committed)."""
    (claim,) = claims(cluster) or [None]
    if claim is None or not (claim.get("status") or {}).get("allocation"):
        return None
    return None if NAMES.finalizer in (claim["metadata"].get("finalizers") or []) else claim


def test_restart_after_crash_between_allocation_and_commit_completes_the_claim(
    work_dir: Path,
) -> None:
    """A controller that died before committing its allocation commits it after a restart."""
    with harness(work_dir, node("node-a", 1)) as cluster:
        fault = cluster.server.faults.inject(
            verb="patch", resource="resourceclaims", status=500, times=1000
        )
        with running(cluster):
            cluster.apply([template("share", "30", "5Gi"), gated_pod("p", "share")])
            cluster.wait_for(lambda: tentative(cluster), "the tentative allocation")
            cluster.wait_for(lambda: fault.hits >= 1 or None, "the failing commit")
        assert objects.has_scheduling_gate(read_pod(cluster, "p"), GATE)
        fault.remove()
        with running(cluster):
            pod = cluster.wait_for(lambda: bound(cluster, "p"), "the pod to be bound after restart")
        (claim,) = claims(cluster)
        assert NAMES.finalizer in claim["metadata"]["finalizers"]
        assert pod["spec"]["nodeName"] == "node-a"


def test_a_tentative_claim_whose_pod_went_while_no_controller_ran_is_released(
    work_dir: Path,
) -> None:
    """After a restart, a named claim allocated but never committed, its pod gone, is cleared."""
    with harness(work_dir, node("node-a", 1)) as cluster:
        named = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "named"},
            "spec": template("x", "30", "5Gi")["spec"]["spec"],
        }
        pod = gated_pod("p", "unused")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "named"}]
        fault = cluster.server.faults.inject(
            verb="patch", resource="resourceclaims", status=500, times=1000
        )
        with running(cluster):
            cluster.apply([named, pod])
            cluster.wait_for(lambda: tentative(cluster), "the tentative allocation")
        fault.remove()
        raw.call(client.CoreV1Api(cluster.api).delete_namespaced_pod, "p", "default")
        with running(cluster):
            cluster.wait_for(
                lambda: not (claims(cluster)[0].get("status") or {}).get("allocation") or None,
                "the tentative allocation to be cleared",
            )
        (claim,) = claims(cluster)
        assert NAMES.finalizer not in (claim["metadata"].get("finalizers") or [])


def test_orphaned_finalizer_without_allocation_is_removed(work_dir: Path) -> None:
    """A claim left with our finalizer but no allocation and no gated pod loses the finalizer."""
    with harness(work_dir, node("node-a", 1)) as cluster:
        resource = client.ResourceV1Api(cluster.api)
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "orphan", "finalizers": [NAMES.finalizer]},
            "spec": template("x")["spec"]["spec"],
        }
        cluster.apply([claim])
        with running(cluster):
            cluster.wait_for(
                lambda: (
                    NAMES.finalizer
                    not in (
                        raw.call(resource.read_namespaced_resource_claim, "orphan", "default")[
                            "metadata"
                        ].get("finalizers")
                        or []
                    )
                ),
                "the stray finalizer to be removed",
            )


@pytest.mark.timeout(110)
def test_two_replicas_with_leader_election_never_double_allocate(work_dir: Path) -> None:
    """200 pods at once, two leader-elected replicas, leader killed midway: no over-commit."""
    nodes = [node(f"node-{i}", 4) for i in range(6)]
    with harness(work_dir, *nodes) as cluster:
        settings = {
            "leader_elect": True,
            "leader_election_namespace": "default",
            "lease_duration": 3,
            "renew_deadline": 2,
            "retry_period": 1,
        }
        registries = {"a": CollectorRegistry(), "b": CollectorRegistry()}
        first, second = (
            Controller(
                cluster.api,
                NAMES,
                ControllerSettings(**settings, leader_election_identity=identity),
                registries[identity],
            )
            for identity in ("a", "b")
        )
        first.start()
        second.start()
        try:
            cluster.wait_for(lambda: first.leading or second.leading, "a leader", timeout=15)
            assert not (first.leading and second.leading)
            cluster.apply([template("share", "30", "4Gi")])
            creator = threading.Thread(
                target=lambda: cluster.apply([gated_pod(f"p{i}", "share") for i in range(200)])
            )
            creator.start()
            cluster.wait_for(
                lambda: (
                    sum(bool((c.get("status") or {}).get("allocation")) for c in claims(cluster))
                    >= 40
                ),
                "some allocations",
                timeout=60,
            )
            leader = first if first.leading else second
            leader.stop()
            creator.join()
            # 24 cards x 3 shares of 30 cores = 72 pods fit; the rest wait with a reason.
            cluster.wait_for(
                lambda: (
                    sum(bool((c.get("status") or {}).get("allocation")) for c in claims(cluster))
                    >= 72
                ),
                "every card to be filled",
                timeout=60,
            )
            assert_no_overcommit(claims(cluster))
            assert (
                sum(bool((c.get("status") or {}).get("allocation")) for c in claims(cluster)) == 72
            )
        finally:
            first.stop()
            second.stop()


def test_conflicts_and_server_errors_are_retried_until_allocated(work_dir: Path) -> None:
    """409s and 500s on claim writes are retried; every pod ends allocated and nothing overflows."""
    with harness(work_dir, node("node-a", 2)) as cluster:
        faults = cluster.server.faults
        conflicts = faults.inject(
            verb="patch", resource="resourceclaims/status", status=409, times=5
        )
        errors = faults.inject(verb="patch", resource="resourceclaims", status=500, times=3)
        with running(cluster):
            cluster.apply([template("share", "30", "4Gi")])
            cluster.apply([gated_pod(f"p{i}", "share") for i in range(6)])
            for i in range(6):
                cluster.wait_for(lambda i=i: bound(cluster, f"p{i}"), f"pod p{i} to be bound")
        assert conflicts.hits == 5
        assert errors.hits == 3
        assert_no_overcommit(claims(cluster))


def test_expired_watch_relists_and_keeps_allocating(work_dir: Path) -> None:
    """After the API server compacts history (410 Gone on watch), new pods still get allocated."""
    with harness(work_dir, node("node-a", 2)) as cluster, running(cluster):
        cluster.apply([template("share", "30", "4Gi"), gated_pod("before", "share")])
        cluster.wait_for(lambda: bound(cluster, "before"), "the first pod")
        cluster.server.compact()
        faults = cluster.server.faults
        faults.inject(verb="watch", drop=True, times=5)
        cluster.apply([gated_pod("after", "share")])
        cluster.wait_for(lambda: bound(cluster, "after"), "the pod created after compaction")


def test_accounting_converges_to_the_api_and_metrics_show_it(work_dir: Path) -> None:
    """After a burst the accounting equals a rebuild from the API, and /metrics agrees."""
    with harness(work_dir, node("node-a", 2)) as cluster:
        registry = CollectorRegistry()
        controller = Controller(
            cluster.api,
            NAMES,
            ControllerSettings(leader_elect=False, resync_seconds=1.0),
            registry,
        )
        controller.start()
        try:
            cluster.apply([template("share", "25", "2Gi")])
            cluster.apply([gated_pod(f"p{i}", "share") for i in range(5)])
            for i in range(5):
                cluster.wait_for(lambda i=i: bound(cluster, f"p{i}"), f"pod p{i}")

            def converged() -> bool:
                truth = AllocatedState.from_claims(claims(cluster))
                return controller.view.snapshot().state == truth

            cluster.wait_for(converged, "the accounting to match the API")
            allocated_cores = sum(
                registry.get_sample_value(
                    "gpushare_controller_card_allocated",
                    {"node": "node-a", "device": device, "capacity": "cores"},
                )
                or 0
                for device in ("gpu-0", "gpu-1")
            )
            assert allocated_cores == 125
            assert (
                registry.get_sample_value(
                    "gpushare_controller_allocations_total", {"result": "allocated"}
                )
                == 5
            )
            assert (
                registry.get_sample_value("gpushare_controller_allocation_latency_seconds_count")
                == 5
            )
        finally:
            controller.stop()


def test_online_and_offline_shares_share_one_card(work_dir: Path) -> None:
    """Scenario 5: an online and an offline share land on the one card, each with its memory."""
    online = template("online", "60", "5Gi")
    offline = template("offline", "40", "5Gi")
    online["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = (
        NAMES.online_device_class
    )
    offline["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = (
        NAMES.offline_device_class
    )
    with harness(work_dir, node("node-a", 1)) as cluster, running(cluster):
        cluster.apply([online, offline, gated_pod("svc", "online"), gated_pod("batch", "offline")])
        cluster.wait_for(lambda: bound(cluster, "svc"), "the online pod")
        cluster.wait_for(lambda: bound(cluster, "batch"), "the offline pod")
        priorities = sorted(
            entry["opaque"]["parameters"].get("priority")
            for c in claims(cluster)
            for entry in c["status"]["allocation"]["devices"]["config"]
        )
        assert priorities == ["offline", "online"]
        memory = [
            c["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"]
            for c in claims(cluster)
        ]
        assert memory == ["5Gi", "5Gi"]


def named_claim_pods(backend: str | None) -> list[Object]:
    """Return a named claim of one share (with ``backend`` if given) and two pods naming it."""
    spec = template("x", "30", "5Gi")["spec"]["spec"]
    if backend is not None:
        parameters = {
            "apiVersion": NAMES.config_api_version,
            "kind": NAMES.config_kind,
            "backend": backend,
        }
        spec["devices"]["config"] = [{"opaque": {"driver": NAMES.driver, "parameters": parameters}}]
    named = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "named"},
        "spec": spec,
    }
    pods = [gated_pod(name, "unused") for name in ("first", "second")]
    for pod in pods:
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "named"}]
    return [named, *pods]


def test_pods_created_together_on_a_hami_core_claim_run_one_at_a_time(work_dir: Path) -> None:
    """Two pods of one named hami-core claim: one runs, the other waits gated until it ends."""
    with harness(work_dir, node("node-a", 1)) as cluster, running(cluster):
        cluster.apply(named_claim_pods(backend=None))

        def one_bound_one_held() -> tuple[Object, str] | None:
            pods = {name: read_pod(cluster, name) for name in ("first", "second")}
            running_pods = [p for p in pods.values() if p["spec"].get("nodeName")]
            held = [n for n, p in pods.items() if objects.has_scheduling_gate(p, GATE)]
            in_use = held and any(e["reason"] == "ClaimInUse" for e in events_for(cluster, held[0]))
            return (running_pods[0], held[0]) if len(running_pods) == 1 and in_use else None

        winner, waiting = cluster.wait_for(one_bound_one_held, "one pod bound, one held")
        (event,) = [e for e in events_for(cluster, waiting) if e["reason"] == "ClaimInUse"]
        assert f'in use by pod "{winner["metadata"]["name"]}"' in event["message"]
        assert event["type"] == "Warning"
        patch_pod_status(client.CoreV1Api(cluster.api), winner, {"phase": "Succeeded"})
        second = cluster.wait_for(lambda: bound(cluster, waiting), "the held pod to be bound")
        assert second["spec"]["nodeName"] == winner["spec"]["nodeName"]


def test_pods_of_a_claim_with_backend_none_run_together(work_dir: Path) -> None:
    """A named claim whose config chooses backend none is shared by both pods at once."""
    with harness(work_dir, node("node-a", 1)) as cluster, running(cluster):
        cluster.apply(named_claim_pods(backend="none"))
        cluster.wait_for(lambda: bound(cluster, "first"), "the first pod")
        cluster.wait_for(lambda: bound(cluster, "second"), "the second pod")
        assert not any(
            e["reason"] == "ClaimInUse"
            for name in ("first", "second")
            for e in events_for(cluster, name)
        )


def test_the_pods_own_cpu_request_steers_it_off_a_full_node(work_dir: Path) -> None:
    """A node whose allocatable CPU the pod exceeds is not chosen; the pod lands where it fits."""
    with harness(work_dir, node("node-a", 1), node("node-b", 1)) as cluster, running(cluster):
        core = client.CoreV1Api(cluster.api)
        for name, cpu in (("node-a", "1"), ("node-b", "8")):
            raw.call(
                core.patch_node_status,
                name,
                {"status": {"allocatable": {"cpu": cpu, "pods": "110"}}},
            )
        hungry = gated_pod("hungry", "share")
        hungry["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2"}
        cluster.apply([template("share", "30", "5Gi"), hungry])
        pod = cluster.wait_for(lambda: bound(cluster, "hungry"), "the pod to be bound")
        assert pod["spec"]["nodeName"] == "node-b"


def test_required_anti_affinity_keeps_a_replica_off_its_peers_node(work_dir: Path) -> None:
    """A pod whose anti-affinity forbids its peer's host is placed on another node."""
    with harness(work_dir, node("node-a", 1), node("node-b", 1)) as cluster, running(cluster):
        first = gated_pod("web-0", "share")
        first["metadata"]["labels"] = {"app": "web"}
        cluster.apply([template("share", "30", "5Gi"), first])
        peer = cluster.wait_for(lambda: bound(cluster, "web-0"), "the first replica")
        second = gated_pod("web-1", "share")
        second["metadata"]["labels"] = {"app": "web"}
        second["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
        cluster.apply([second])
        placed = cluster.wait_for(lambda: bound(cluster, "web-1"), "the second replica")
        assert placed["spec"]["nodeName"] != peer["spec"]["nodeName"]
