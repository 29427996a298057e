"""Exact interleavings of the controller's threads and the watch lag (found in review)."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from controller.interleave import claim_obj, make, pod_obj, settle
from controller.kit import NAMES, node
from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.api import Backend
from dra_driver.controller.app import Controller
from dra_driver.controller.settings import ControllerSettings
from dra_driver.engine import Snapshot
from dra_driver.k8s import objects
from dra_driver.k8s.reconcile import Requeue
from dra_driver.structured.allocated import AllocatedState


def over_committed(claims: list[dict]) -> dict:
    """Return the cards whose cores exceed 100."""
    state = AllocatedState.from_claims(claims)
    return {device: used for device, used in state.consumed.items() if used.get("cores", 0) > 100}


def test_a_snapshot_built_while_we_write_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build on another thread that misses our write must not become the cached snapshot."""
    view, server, allocator, _, _ = make(node("n", 1))
    server.put("claims", claim_obj("a"))
    server.put("claims", claim_obj("b"))
    server.put("pods", pod_obj("pa", "a"))
    server.put("pods", pod_obj("pb", "b"))
    original = Snapshot.build.__func__  # type: ignore[attr-defined]

    def write_pa() -> None:
        with contextlib.suppress(Requeue):  # written; its commit waits for the watch
            allocator.reconcile(("default", "pa"))

    during_build = [write_pa]

    def build(cls, *args, **kwargs):
        snapshot = original(cls, *args, **kwargs)
        if during_build:
            during_build.pop()()  # the allocator writes while this (scrape) build is stale
        return snapshot

    monkeypatch.setattr(Snapshot, "build", classmethod(build))
    view.snapshot()
    with pytest.raises(Requeue):
        allocator.reconcile(("default", "pb"))  # the watch has not delivered pa's claim yet
    assert not over_committed(server.claims())


def test_rollback_keeps_a_shared_claim_another_pod_waits_for() -> None:
    """A partial allocation is rolled back only if no other pod refers to the claim."""
    _, server, allocator, _, _ = make(node("n1", 1), node("n2", 2))
    for claim in (claim_obj("shared", "30", "1Gi"), claim_obj("d1", "30", "1Gi"), claim_obj("d2")):
        server.put("claims", claim)
    server.put("pods", pod_obj("p1", "shared", "d1"))
    server.put("pods", pod_obj("p2", "shared", "d2"))
    settle(allocator, server, "p1")
    for _ in range(3):
        with contextlib.suppress(Requeue):
            allocator.reconcile(("default", "p2"))
        server.deliver()
    placed = server.nodes_of_claims()
    assert placed["shared"] == placed["d1"] == "n1"
    assert "d2" not in placed


def test_a_pod_just_ungated_holds_its_hami_core_claim_before_the_pod_watch_shows_it() -> None:
    """A second pod of a hami-core claim is held while the cache lags, and goes once it ended."""
    view, server, allocator, _, events = make(node("n", 1), default_backend=Backend.HAMI_CORE)
    server.put("claims", claim_obj("x", "10", "1Gi"))
    server.put("pods", pod_obj("pa", "x"))
    server.put("pods", pod_obj("pb", "x"))
    with contextlib.suppress(Requeue):
        allocator.reconcile(("default", "pa"))  # allocates; the commit waits for the watch
    server.deliver()
    allocator.reconcile(("default", "pa"))  # commits and ungates
    server.deliver([(kind, obj) for kind, obj in server.pending if kind == "claims"])
    server.pending = [(kind, obj) for kind, obj in server.pending if kind != "claims"]
    assert objects.has_scheduling_gate(view.pods.get("default", "pa"), NAMES.scheduling_gate)
    with pytest.raises(Requeue):
        allocator.reconcile(("default", "pb"))
    (held,) = [e for e in events.items if e[1] == "ClaimInUse"]
    assert held[0] == "pb"
    assert 'in use by pod "pa"' in held[2]
    assert objects.has_scheduling_gate(server.read_pod("default", "pb"), NAMES.scheduling_gate)
    server.deliver()
    pa = server.read_pod("default", "pa")
    server.put("pods", {**pa, "status": {"phase": "Succeeded"}})
    allocator.reconcile(("default", "pb"))
    server.deliver()
    assert not objects.has_scheduling_gate(view.pods.get("default", "pb"), NAMES.scheduling_gate)


def test_leadership_lost_while_syncing_never_starts_the_loops() -> None:
    """If the Lease is lost before the informers sync, the loops never start."""
    controller = Controller(
        client.ApiClient(), NAMES, ControllerSettings(leader_elect=True), CollectorRegistry()
    )
    synced = threading.Event()
    controller.view.wait_synced = lambda timeout=None: synced.wait(timeout)  # type: ignore[method-assign]
    leading = threading.Thread(target=controller._lead)
    leading.start()
    time.sleep(0.1)
    controller._lose()
    synced.set()
    leading.join(2)
    workers = [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("allocate", "release", "resync"))
    ]
    assert controller.lost.is_set()
    assert not controller.leading
    assert workers == []


def test_losing_leadership_does_not_wait_for_the_resync_period() -> None:
    """Ending a term stops the resync thread at once, not after its sleep."""
    controller = Controller(
        client.ApiClient(),
        NAMES,
        ControllerSettings(leader_elect=True, resync_seconds=30.0),
        CollectorRegistry(),
    )
    controller.view.wait_synced = lambda **_: True  # type: ignore[method-assign]
    controller._lead()
    assert controller.leading
    done = threading.Thread(target=controller._lose)
    done.start()
    done.join(5)
    assert not done.is_alive()
    assert controller.lost.is_set()


def test_a_gated_pod_waits_for_a_missing_device_class() -> None:
    """A gated pod whose class does not exist stays gated with a reason instead of going stock."""
    _, server, allocator, _, events = make(node("n", 1))
    missing = claim_obj("c")
    missing["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = (
        "late.gpushare.dra.dev"
    )
    server.put("claims", missing)
    server.put("pods", pod_obj("p", "c"))
    with pytest.raises(Requeue):
        allocator.reconcile(("default", "p"))
    assert server.objs[("pods", "default", "p")]["spec"]["schedulingGates"]
    assert events.items == [
        ("p", "FailedAllocation", "waiting for DeviceClass late.gpushare.dra.dev to exist")
    ]


def test_claim_changes_reach_the_kept_snapshot_without_a_rebuild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claims allocated or released by others are counted in place; nothing is rebuilt."""
    view, server, allocator, _, _ = make(node("n", 2))
    server.put("claims", claim_obj("a"))
    server.put("pods", pod_obj("pa", "a"))
    settle(allocator, server, "pa")
    kept = view.snapshot()
    builds: list[object] = []
    monkeypatch.setattr(Snapshot, "build", lambda *a, **_: builds.append(a))
    (allocated,) = [c for c in server.claims() if c["metadata"]["name"] == "a"]
    foreign = {**claim_obj("b"), "status": {"allocation": allocated["status"]["allocation"]}}
    foreign["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1"
    server.put("claims", foreign)
    assert view.snapshot() is kept
    assert kept.state.in_use(("gpushare.dra.dev", "n", "gpu-1"))
    server.put("claims", claim_obj("b"))  # released again
    assert view.snapshot() is kept
    assert not kept.state.in_use(("gpushare.dra.dev", "n", "gpu-1"))
    assert builds == []


def test_a_deleted_claim_stops_counting_when_its_name_is_reused() -> None:
    """A claim deleted and created again under its name frees what the old one held."""
    view, server, allocator, _, _ = make(node("n", 1))
    server.put("claims", claim_obj("a"))
    server.put("pods", pod_obj("pa", "a"))
    settle(allocator, server, "pa")
    kept = view.snapshot()
    assert kept.state.in_use(("gpushare.dra.dev", "n", "gpu-0"))
    reborn = {**claim_obj("a"), "metadata": {**claim_obj("a")["metadata"], "uid": "uid-a-2"}}
    server.put("claims", reborn)
    assert view.snapshot() is kept
    assert not kept.state.in_use(("gpushare.dra.dev", "n", "gpu-0"))
    assert set(kept.counted) == set()


def test_a_new_leader_builds_its_snapshot_before_any_pod_asks() -> None:
    """Leading starts with the cluster's devices read, so the first decision pays nothing."""
    controller = Controller(
        client.ApiClient(), NAMES, ControllerSettings(leader_elect=True), CollectorRegistry()
    )
    controller.view.wait_synced = lambda **_: True  # type: ignore[method-assign]
    assert controller.view.cached_snapshot() is None
    controller._lead()
    try:
        assert controller.leading
        assert controller.view.cached_snapshot() is not None
    finally:
        controller._lose()
