"""What wakes the controller: only changes its workers can act on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from controller.kit import NAMES, node
from controller.test_controller_e2e import bound, gated_pod, harness, template
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.podstatus import patch_pod_status
from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.controller import allocator
from dra_driver.controller.app import Controller
from dra_driver.controller.releaser import released_by_change
from dra_driver.controller.settings import ControllerSettings
from dra_driver.controller.view import ClusterView
from dra_driver.k8s import raw
from dra_driver.structured.configshares import SCHEDULER_FINALIZER

Object = dict[str, Any]


def _gated_names(view: ClusterView) -> list[str]:
    return [pod["metadata"]["name"] for pod in view.gated_pods()]


def test_the_view_indexes_the_pods_behind_our_gate_as_they_change(work_dir: Path) -> None:
    """A gated pod is listed; once its gate is removed, or it is deleted, it is not."""
    with harness(work_dir, node("node-a", 1)) as cluster:
        view = ClusterView(cluster.api, NAMES, lambda *_: None)
        view.start()
        try:
            cluster.apply(
                [
                    template("share", "30", "5Gi"),
                    gated_pod("held", "share"),
                    gated_pod("free", "share", gated=False),
                    gated_pod("gone", "share"),
                ]
            )
            cluster.wait_for(
                lambda: _gated_names(view) == ["held", "gone"], "the two gated pods indexed"
            )
            assert view.is_gated("default", "held")
            assert not view.is_gated("default", "free")
            core = client.CoreV1Api(cluster.api)
            ungate = [{"op": "remove", "path": "/spec/schedulingGates"}]
            raw.call(core.patch_namespaced_pod, "held", "default", ungate,
                     _content_type=raw.JSON_PATCH)  # fmt: skip
            core.delete_namespaced_pod("gone", "default")
            cluster.wait_for(lambda: _gated_names(view) == [], "both out of the index")
            assert not view.is_gated("default", "held")
        finally:
            view.stop()


def _unplaceable(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(
        "gpushare_controller_allocations_total", {"result": "unplaceable"}
    )
    return value or 0.0


def _settled(registry: CollectorRegistry, quiet: float = 0.5) -> float:
    """Return the unplaceable count once it has not moved for ``quiet`` seconds."""
    value, since = _unplaceable(registry), time.monotonic()
    while time.monotonic() - since < quiet:
        time.sleep(0.05)
        if (now := _unplaceable(registry)) != value:
            value, since = now, time.monotonic()
    return value


def _run(
    cluster: FakeCluster, registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> Controller:
    # Neither the periodic resync nor the unplaceable pod's own retry within the test: every
    # retry must come from an event.
    monkeypatch.setattr(allocator, "_UNPLACEABLE_RETRY_SECONDS", 3600.0)
    settings = ControllerSettings(leader_elect=False, resync_seconds=3600.0)
    controller = Controller(cluster.api, NAMES, settings, registry)
    controller.start()
    return controller


def test_a_waiting_pod_is_retried_when_room_is_freed_not_when_a_claim_is_made(
    work_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new claim frees nothing: no retry; the card's pod finishing: the waiting pod is bound."""
    registry = CollectorRegistry()
    with harness(work_dir, node("node-a", 1)) as cluster:
        controller = _run(cluster, registry, monkeypatch)
        try:
            cluster.apply([template("whole"), gated_pod("first", "whole")])
            first = cluster.wait_for(lambda: bound(cluster, "first"), "the first pod bound")
            cluster.apply([gated_pod("second", "whole")])
            cluster.wait_for(lambda: _unplaceable(registry) >= 1, "the second pod to wait")
            tried = _settled(registry)  # the retries the second pod's own events cause
            cluster.apply(
                [
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        "metadata": {"name": "unrelated"},
                        "spec": template("whole")["spec"]["spec"],
                    }
                ]
            )
            time.sleep(1.0)  # time enough for a retry, if the new claim caused one
            assert _unplaceable(registry) == tried
            assert bound(cluster, "second") is None
            patch_pod_status(client.CoreV1Api(cluster.api), first, {"phase": "Succeeded"})
            second = cluster.wait_for(lambda: bound(cluster, "second"), "the second pod bound")
            assert second["spec"]["nodeName"] == "node-a"
        finally:
            controller.stop()


def test_a_pod_waiting_for_cpu_is_placed_when_the_nodes_other_pod_ends(
    work_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bound pod holding the node's CPU finishes: the gated pod waiting for it is placed."""
    registry = CollectorRegistry()
    with harness(work_dir, node("node-a", 1)) as cluster:
        core = client.CoreV1Api(cluster.api)
        raw.call(core.patch_node_status, "node-a",
                 {"status": {"allocatable": {"cpu": "2", "pods": "110"}}})  # fmt: skip
        busy: Object = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "busy"},
            "spec": {
                "nodeName": "node-a",
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}
                ],
            },
        }
        hungry = gated_pod("hungry", "share")
        hungry["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
        controller = _run(cluster, registry, monkeypatch)
        try:
            cluster.apply([busy])
            cluster.apply([template("share", "30", "5Gi"), hungry])
            cluster.wait_for(lambda: _unplaceable(registry) >= 1, "the pod to wait for CPU")
            assert bound(cluster, "hungry") is None
            running = raw.call(core.read_namespaced_pod, "busy", "default")
            patch_pod_status(core, running, {"phase": "Succeeded"})
            placed = cluster.wait_for(lambda: bound(cluster, "hungry"), "the pod placed")
            assert placed["spec"]["nodeName"] == "node-a"
        finally:
            controller.stop()


@pytest.mark.parametrize(
    ("finalizers", "allocated", "reserved", "wakes"),
    [
        ([], False, False, False),  # a new claim: nothing to release
        ([], True, True, False),  # kube-scheduler's, in use: its pod's end comes as an event
        ([NAMES.finalizer], True, True, False),  # ours, in use: likewise
        ([NAMES.finalizer], True, False, True),  # ours, no longer reserved: release it
        ([], True, False, True),  # allocated, unreserved: the releaser judges whose it is
        ([NAMES.finalizer], False, False, True),  # a stray finalizer to remove
        ([NAMES.finalizer, SCHEDULER_FINALIZER], True, True, True),  # ours beside theirs: let go
    ],
    ids=["new", "theirs-in-use", "ours-in-use", "ours-free", "allocated-free", "stray", "foreign"],
)
def test_only_claim_changes_the_releaser_can_act_on_wake_it(
    finalizers: list[str], allocated: bool, reserved: bool, wakes: bool
) -> None:
    """A claim's change wakes the releaser only where the change alone may let it release."""
    status: Object = {}
    if allocated:
        status["allocation"] = {"devices": {"results": [{"driver": NAMES.driver}]}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u"}]
    claim = {
        "metadata": {"name": "c", "namespace": "n", "finalizers": finalizers},
        "status": status,
    }
    assert released_by_change(NAMES, claim) is wakes
