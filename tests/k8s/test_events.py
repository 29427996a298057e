"""Events reach the API server, and sending them in the background never makes the caller wait."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.events import EventRecorder, EventSender

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
}


@pytest.fixture
def api_client(server: FakeApiServer) -> Iterator[client.ApiClient]:
    with server.api_client() as api:
        yield api


def events(api_client: client.ApiClient) -> list[dict]:
    """List the events in the default namespace."""
    body = raw.call(client.CoreV1Api(api_client).list_namespaced_event, "default")
    return list(body.get("items") or [])


def test_a_recorded_event_names_its_object_reason_and_component(
    api_client: client.ApiClient,
) -> None:
    """The Event points at the object (uid, version), with type, reason, message and source."""
    EventRecorder(api_client, "gpushare-controller").record(POD, "Warning", "Why", "x" * 2000)
    (event,) = events(api_client)
    assert event["involvedObject"]["uid"] == "u-1"
    assert event["involvedObject"]["resourceVersion"] == "7"
    assert (event["type"], event["reason"]) == ("Warning", "Why")
    assert event["message"] == "x" * 1024
    assert event["source"] == {"component": "gpushare-controller"}


def test_a_failed_event_write_is_dropped_not_raised(
    server: FakeApiServer, api_client: client.ApiClient
) -> None:
    """An API error on the event is logged and swallowed: the work it describes goes on."""
    server.faults.inject(verb="create", resource="events", status=500)
    EventRecorder(api_client, "c").record(POD, "Normal", "Done", "ok")
    assert events(api_client) == []


def test_the_sender_returns_at_once_while_the_api_server_is_slow(
    server: FakeApiServer, api_client: client.ApiClient
) -> None:
    """Recording through the sender does not wait for a slow create; stopping flushes it."""
    server.faults.inject(verb="create", resource="events", delay=0.5)
    sender = EventSender(EventRecorder(api_client, "c"))
    sender.start()
    started = time.monotonic()
    sender.record(POD, "Normal", "First", "1")
    sender.record(POD, "Normal", "Second", "2")
    assert time.monotonic() - started < 0.2
    sender.stop(timeout=5)
    assert sorted(e["reason"] for e in events(api_client)) == ["First", "Second"]


def test_a_full_sender_queue_drops_new_events_instead_of_growing(
    api_client: client.ApiClient,
) -> None:
    """Beyond its capacity the sender drops events; what it queued is still sent."""
    sender = EventSender(EventRecorder(api_client, "c"), capacity=2)
    for reason in ("A", "B", "C"):
        sender.record(POD, "Normal", reason, "")
    sender.start()
    sender.stop(timeout=5)
    assert sorted(e["reason"] for e in events(api_client)) == ["A", "B"]
