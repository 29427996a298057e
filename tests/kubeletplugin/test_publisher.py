"""SlicePublisher against the fake API server: generations, repair and capability detection."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client
from structlog.testing import capture_logs

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.k8s import raw
from dra_driver.k8s.settings import ApiTimeouts
from dra_driver.kubeletplugin.publisher import SlicePublisher
from dra_driver.nvml.inventory import Card, Health
from dra_driver.publishing.slices import desired_slices
from dra_driver.publishing.slicesync import slice_name

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NODE = "node-a"
GI = 1024**3
SERVER_METADATA = {"name", "uid", "resourceVersion", "creationTimestamp", "generation"}
T = TypeVar("T")


def card(i: int, **fields: Any) -> Card:
    values: dict[str, Any] = {
        "uuid": f"GPU-00000000-0000-4000-8000-{i:012x}",
        "product_name": "Tesla T4",
        "memory_bytes": 15 * GI,
        "pci_bus_id": f"0000:{0x10 + i // 32:02x}:{i % 32:02x}.0",
        "minor": i,
        "index": i % 128,
        "architecture": "Turing",
        "cuda_compute_capability": "7.5",
        "driver_version": "550.54.15",
    }
    values.update(fields)
    return Card(**values)


def wait_for(predicate: Callable[[], T | None], what: str, timeout: float = 10) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def fake_server(version: str = "1.36", *, node: bool = True) -> Iterator[FakeApiServer]:
    with FakeApiServer(kube_version=version) as server:
        if node:
            create_node(server)
        yield server
        assert server.internal_errors == []


def create_node(server: FakeApiServer) -> str:
    node = server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    return str(node["metadata"]["uid"])


@contextmanager
def publishing(
    server: FakeApiServer,
    cards: list[Card] | None = None,
    timeouts: ApiTimeouts | None = None,
    **options: Any,
) -> Iterator[SlicePublisher]:
    with server.api_client(timeouts) as api:
        publisher = SlicePublisher(api, NAMES, NODE, **options)
        publisher.start()
        try:
            if cards is not None:
                publisher.publish(cards)
            yield publisher
        finally:
            publisher.stop()


def slices(server: FakeApiServer) -> list[dict[str, Any]]:
    return server.list("resourceslices", field_selector=f"spec.nodeName={NODE}")


def settled(server: FakeApiServer, count: int) -> Callable[[], list[dict[str, Any]] | None]:
    """Return a predicate: the node's slices once there are ``count`` at one generation."""

    def check() -> list[dict[str, Any]] | None:
        found = slices(server)
        generations = {s["spec"]["pool"]["generation"] for s in found}
        return found if len(found) == count and len(generations) == 1 else None

    return check


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with fake_server() as running:
        yield running


def test_publishes_exactly_the_expected_slice(server: FakeApiServer) -> None:
    """Two cards become one slice, generation 1, equal to the builder's output plus a name."""
    cards = [card(0), card(1)]
    with publishing(server, cards) as publisher:
        assert publisher.wait_published(10)
        assert publisher.consumable_capacity_supported is True
    (published,) = slices(server)
    node_uid = server.get("nodes", None, NODE)["metadata"]["uid"]  # type: ignore[index]
    (expected,) = desired_slices(NAMES, NODE, node_uid, cards)
    expected["spec"]["pool"]["generation"] = 1
    assert published["spec"] == expected["spec"]
    metadata = {k: v for k, v in published["metadata"].items() if k not in SERVER_METADATA}
    assert metadata == expected["metadata"]
    assert published["metadata"]["name"].startswith(f"{NODE}-{DEFAULT_DRIVER_NAME}-")


def test_slices_are_owned_by_the_node(server: FakeApiServer) -> None:
    """The ownerReference names the Node with its uid, so slices are collected with it."""
    with publishing(server, [card(0)]) as publisher:
        assert publisher.wait_published(10)
    node = server.get("nodes", None, NODE)
    assert node is not None
    (published,) = slices(server)
    assert published["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": NODE,
            "uid": node["metadata"]["uid"],
            "controller": True,
        }
    ]


def test_health_change_in_one_slice_updates_in_place(server: FakeApiServer) -> None:
    """A card turning unhealthy is tainted in place: same object, same generation."""
    with publishing(server, [card(0), card(1)]) as publisher:
        assert publisher.wait_published(10)
        (before,) = slices(server)
        server.reset_requests()
        publisher.publish([card(0), card(1, health=Health.UNHEALTHY)])
        assert publisher.wait_published(10)
    (after,) = slices(server)
    assert after["metadata"]["name"] == before["metadata"]["name"]
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    assert after["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in after["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert "taints" not in after["spec"]["devices"][0]
    (taint,) = after["spec"]["devices"][1]["taints"]
    assert taint["key"] == "gpushare.dra.dev/unhealthy"
    assert server.requests[("create", "resourceslices")] == 0
    assert server.requests[("delete", "resourceslices")] == 0


def test_growing_past_128_cards_bumps_the_generation(server: FakeApiServer) -> None:
    """128 → 130 cards: two slices at generation 2, each counting 2, no generation-1 left."""
    with publishing(server, [card(i) for i in range(128)]) as publisher:
        assert publisher.wait_published(10)
        (first,) = slices(server)
        assert first["spec"]["pool"]["generation"] == 1
        publisher.publish([card(i) for i in range(130)])
        assert publisher.wait_published(10)
        found = wait_for(settled(server, 2), "two slices at one generation")
    assert sorted(len(s["spec"]["devices"]) for s in found) == [2, 128]
    assert [s["spec"]["pool"] for s in found] == [
        {"name": NODE, "generation": 2, "resourceSliceCount": 2}
    ] * 2


def test_a_slice_deleted_by_hand_is_recreated(server: FakeApiServer) -> None:
    """Someone deletes the slice: the publisher sees the DELETED event and writes it again."""
    with publishing(server, [card(0)]) as publisher, server.api_client() as api:
        assert publisher.wait_published(10)
        (original,) = slices(server)
        raw.call(client.ResourceV1Api(api).delete_resource_slice, original["metadata"]["name"])

        def recreated() -> dict[str, Any] | None:
            found = slices(server)
            fresh = [s for s in found if s["metadata"]["name"] != original["metadata"]["name"]]
            return fresh[0] if len(found) == 1 and fresh else None

        again = wait_for(recreated, "the slice to be recreated")
    assert again["spec"]["devices"] == original["spec"]["devices"]
    assert again["spec"]["pool"]["generation"] == 2


def test_waits_for_the_node_to_exist() -> None:
    """Without a Node object nothing is published; once it exists, the slice follows."""
    with fake_server(node=False) as server, publishing(server, [card(0)]) as publisher:
        assert not publisher.wait_published(0.3)
        assert slices(server) == []
        create_node(server)
        assert publisher.wait_published(10)
        assert len(slices(server)) == 1


def test_api_errors_are_retried(server: FakeApiServer) -> None:
    """A failing create (500) and a conflicting update (409) are retried until they succeed."""
    server.faults.inject(verb="create", resource="resourceslices", status=500, times=2)
    with publishing(server, [card(0), card(1)]) as publisher:
        assert publisher.wait_published(10)
        server.faults.inject(verb="update", resource="resourceslices", status=409, times=1)
        publisher.publish([card(0)])
        assert publisher.wait_published(10)
    (published,) = slices(server)
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0"]


def test_a_create_whose_answer_never_comes_is_not_repeated_blindly(
    server: FakeApiServer,
) -> None:
    """A created slice whose answer was lost is found by listing, never created twice."""
    # The informer never hears of the new slice: only a fresh list can show it was stored.
    server.faults.inject(verb="watch", resource="resourceslices", hang=True)
    stored = server.faults.inject(
        verb="create",
        resource="resourceslices",
        when=lambda request: "dryRun" not in request.query,  # not the capability probe
        hang=True,
        after=True,
        times=1,
    )
    short = ApiTimeouts(connect=1, request=1, watch=30)
    with publishing(server, [card(0)], short) as publisher:
        assert publisher.wait_published(15)
    assert stored.hits == 1
    (published,) = slices(server)
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0"]


def test_stripped_capacity_fields_publish_plain_devices_and_say_why() -> None:
    """On 1.35 (gate off) each card is a plain device; the error names version and fix."""
    messages: list[str] = []
    with (
        fake_server("1.35") as server,
        capture_logs() as logs,
        publishing(server, [card(0), card(1)], on_capacity_unsupported=messages.append) as pub,
    ):
        assert pub.wait_published(10)
        assert pub.consumable_capacity_supported is False
        (published,) = slices(server)
    devices = published["spec"]["devices"]
    assert [d["name"] for d in devices] == ["gpu-0", "gpu-1"]
    for device in devices:
        assert "allowMultipleAllocations" not in device
        assert device["capacity"]["cores"] == {"value": "100"}
        assert set(device["capacity"]["memory"]) == {"value"}
    errors = [e for e in logs if e["event"] == "slices.consumable_capacity_unsupported"]
    assert len(errors) == 1
    assert errors[0]["log_level"] == "warning"
    assert errors[0]["mode"] == "plain-devices"
    assert errors[0]["git_version"] == "v1.35.0"
    assert "DRAConsumableCapacity feature gate" in errors[0]["action"]
    assert len(messages) == 1
    assert "v1.35.0" in messages[0]
    assert "publishing each card as a plain device" in messages[0]
    assert "cores and memory of each claim's GpuShareConfig" in messages[0]
    assert "kube-apiserver, kube-scheduler and kubelet" in messages[0]


def test_plain_devices_are_not_mistaken_for_a_gate_turned_off_again() -> None:
    """Writes of plain devices keep the publisher settled: no flapping, one slice, no requeue."""
    with fake_server("1.35") as server, publishing(server, [card(0)], recheck_seconds=60) as pub:
        assert pub.wait_published(10)
        first = slices(server)
        pub.publish([card(0), card(1)])
        assert pub.wait_published(10)
        assert pub.consumable_capacity_supported is False
    (published,) = slices(server)
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert slice_name(published) == slice_name(first[0])


def test_a_shareable_server_is_reported_once() -> None:
    """On 1.36 the first publish reports consumable capacity, logged once; later ones do not."""
    changes: list[bool] = []
    with (
        fake_server() as server,
        capture_logs() as logs,
        publishing(server, [card(0)], on_capacity_change=changes.append) as publisher,
    ):
        assert publisher.wait_published(10)
        publisher.publish([card(0), card(1)])
        assert publisher.wait_published(10)
    assert changes == [True]
    found = [e for e in logs if e["event"] == "slices.consumable_capacity_supported"]
    assert [(e["log_level"], e["mode"]) for e in found] == [("info", "consumable-capacity")]


def test_re_checks_of_a_plain_server_report_nothing_new() -> None:
    """Many re-checks finding the gate still off: one report, one warning, still plain."""
    changes: list[bool] = []
    with (
        fake_server("1.35") as server,
        capture_logs() as logs,
        publishing(
            server, [card(0)], on_capacity_change=changes.append, recheck_seconds=0.02
        ) as publisher,
    ):
        assert publisher.wait_published(10)
        # The first dry-run create, a real create, then re-checks: each one a dry-run create.
        wait_for(lambda: server.requests[("create", "resourceslices")] >= 6, "five re-checks")
        assert publisher.consumable_capacity_supported is False
    assert changes == [False]
    errors = [e for e in logs if e["event"] == "slices.consumable_capacity_unsupported"]
    assert len(errors) == 1


def test_enabling_the_gate_later_makes_the_same_devices_shareable() -> None:
    """The periodic re-check notices the gate turned on: the same device names, now shareable."""
    changes: list[bool] = []
    with (
        fake_server("1.35") as server,
        capture_logs() as logs,
        publishing(
            server, [card(0)], recheck_seconds=0.2, on_capacity_change=changes.append
        ) as publisher,
    ):
        assert publisher.wait_published(10)
        assert publisher.consumable_capacity_supported is False
        (plain,) = slices(server)[0]["spec"]["devices"]
        server.app.admission.gates.enabled["DRAConsumableCapacity"] = True

        def shareable() -> dict[str, Any] | None:
            found = slices(server)
            devices = found[0]["spec"].get("devices") or [] if len(found) == 1 else []
            return devices[0] if devices and devices[0].get("allowMultipleAllocations") else None

        device = wait_for(shareable, "the device to become shareable")
        supported = wait_for(lambda: publisher.consumable_capacity_supported, "the re-check")
    assert supported is True
    assert device["name"] == plain["name"]
    assert "requestPolicy" in device["capacity"]["cores"]
    assert changes == [False, True]
    (turned_on,) = [e for e in logs if e["event"] == "slices.consumable_capacity_supported"]
    assert turned_on["mode"] == "consumable-capacity"
    assert turned_on["action"] == "publishing shareable devices"


def test_stop_is_prompt_and_leaves_no_thread(server: FakeApiServer) -> None:
    """stop() returns at once on a quiet watch and joins the informer and worker threads."""
    before = set(threading.enumerate())
    with server.api_client() as api:
        publisher = SlicePublisher(api, NAMES, NODE)
        publisher.start()
        publisher.publish([card(0)])
        assert publisher.wait_published(10)
        started = time.monotonic()
        publisher.stop()
        assert time.monotonic() - started < 2
    leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert [t.name for t in leftover if not t.name.startswith("fake-apiserver")] == []
