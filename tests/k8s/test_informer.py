"""The informer keeps a faithful cache through watches, relists and shutdowns."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client

from dra_driver.k8s import informer as informer_module
from dra_driver.k8s import raw
from dra_driver.k8s.informer import EventType, Informer
from dra_driver.k8s.objects import Object
from dra_driver.k8s.settings import ApiTimeouts


def slice_(name: str, node: str) -> Object:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpushare.dra.dev",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[EventType, str]] = []
        self.changed = threading.Condition()

    def __call__(self, kind: EventType, obj: Object) -> None:
        with self.changed:
            self.events.append((kind, obj["metadata"]["name"]))
            self.changed.notify_all()

    def wait_for(self, count: int, timeout: float = 5) -> list[tuple[EventType, str]]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.events) >= count, timeout), self.events
            return list(self.events)


@pytest.fixture
def api(server: FakeApiServer) -> Iterator[client.ResourceV1Api]:
    with server.api_client() as api_client:
        yield client.ResourceV1Api(api_client)


def test_initial_list_then_watch_events(api: client.ResourceV1Api) -> None:
    """Existing objects arrive as ADDED, later changes as ADDED/MODIFIED/DELETED, cache in step."""
    raw.call(api.create_resource_slice, slice_("s1", "n1"))
    recorder = Recorder()
    informer = Informer(api.list_resource_slice, name="t", handler=recorder)
    informer.start()
    try:
        assert informer.wait_synced(5)
        raw.call(api.create_resource_slice, slice_("s2", "n2"))
        raw.call(api.patch_resource_slice, "s1", {"metadata": {"labels": {"x": "y"}}})
        raw.call(api.delete_resource_slice, "s2")
        events = recorder.wait_for(4)
        assert events == [("ADDED", "s1"), ("ADDED", "s2"), ("MODIFIED", "s1"), ("DELETED", "s2")]
        assert [o["metadata"]["name"] for o in informer.list()] == ["s1"]
        assert informer.get("", "s1")["metadata"]["labels"] == {"x": "y"}  # type: ignore[index]
    finally:
        informer.stop()


def test_field_selector_limits_the_cache(api: client.ResourceV1Api) -> None:
    """A field selector (spec.nodeName) keeps only matching objects in the cache."""
    raw.call(api.create_resource_slice, slice_("s1", "n1"))
    raw.call(api.create_resource_slice, slice_("s2", "n2"))
    informer = Informer(api.list_resource_slice, name="t", field_selector="spec.nodeName=n2")
    informer.start()
    try:
        assert informer.wait_synced(5)
        assert [o["metadata"]["name"] for o in informer.list()] == ["s2"]
    finally:
        informer.stop()


def test_expired_watch_relists_and_reports_the_differences(
    server: FakeApiServer, api: client.ResourceV1Api
) -> None:
    """After the history is compacted the informer relists and fires what it missed as events."""
    raw.call(api.create_resource_slice, slice_("s1", "n1"))
    recorder = Recorder()
    informer = Informer(
        api.list_resource_slice, name="t", handler=recorder, timeouts=ApiTimeouts(watch=1)
    )
    informer.start()
    try:
        assert informer.wait_synced(5)
        recorder.wait_for(1)
        # Keep the informer from watching, change things and compact the history behind it:
        # its next watch from the old resourceVersion gets 410 Expired.
        outage = server.faults.inject(verb="watch", status=503)
        deadline = time.monotonic() + 5
        while outage.hits == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        raw.call(api.delete_resource_slice, "s1")
        raw.call(api.create_resource_slice, slice_("s3", "n3"))
        server.compact()
        outage.remove()
        events = recorder.wait_for(3, timeout=15)
        assert sorted(events[1:]) == [("ADDED", "s3"), ("DELETED", "s1")]
        assert [o["metadata"]["name"] for o in informer.list()] == ["s3"]
    finally:
        informer.stop()


def test_stop_is_prompt_on_a_quiet_watch(api: client.ResourceV1Api) -> None:
    """stop() returns quickly even when no event would ever end the watch."""
    informer = Informer(api.list_resource_slice, name="t")
    informer.start()
    assert informer.wait_synced(5)
    time.sleep(0.2)
    started = time.monotonic()
    informer.stop()
    assert time.monotonic() - started < 1.0


def test_stop_survives_a_watch_that_closed_on_its_own(
    api: client.ResourceV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch whose socket is already gone (EBADF on shutdown) still stops cleanly."""
    informer = Informer(api.list_resource_slice, name="t")
    informer.start()
    assert informer.wait_synced(5)
    time.sleep(0.2)
    response = informer._response
    assert response is not None
    real = response.shutdown

    def closed() -> None:
        real()  # end the watch, then report what a socket closed underneath reports
        raise OSError(9, "Bad file descriptor")

    monkeypatch.setattr(response, "shutdown", closed)
    informer.stop()


def test_a_failing_handler_does_not_stop_the_watch(api: client.ResourceV1Api) -> None:
    """An exception in the handler is logged and later events still arrive."""
    seen: list[str] = []

    def handler(kind: EventType, obj: Object) -> None:
        seen.append(obj["metadata"]["name"])
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("boom")

    informer = Informer(api.list_resource_slice, name="t", handler=handler)
    informer.start()
    try:
        assert informer.wait_synced(5)
        raw.call(api.create_resource_slice, slice_("bad", "n1"))
        raw.call(api.create_resource_slice, slice_("good", "n2"))
        deadline = time.monotonic() + 5
        while "good" not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == ["bad", "good"]
    finally:
        informer.stop()


def test_an_added_handler_sees_every_change_after_the_first_one_even_if_that_fails(
    api: client.ResourceV1Api,
) -> None:
    """A second reader's handler gets each event after the first; only before the start."""
    order: list[str] = []

    def first(kind: EventType, obj: Object) -> None:
        order.append(f"first {kind} {obj['metadata']['name']}")
        raise RuntimeError("the first reader's bug is not the second's")

    second = Recorder()
    informer = Informer(api.list_resource_slice, name="t", handler=first)
    informer.add_handler(lambda kind, obj: (order.append(f"second {kind}"), second(kind, obj)))
    informer.start()
    try:
        with pytest.raises(RuntimeError, match="before the informer starts"):
            informer.add_handler(second)
        assert informer.wait_synced(5)
        raw.call(api.create_resource_slice, slice_("s1", "n1"))
        assert second.wait_for(1) == [("ADDED", "s1")]
        assert order == ["first ADDED s1", "second ADDED"]
    finally:
        informer.stop()


def test_the_version_moves_past_an_event_only_after_its_handler_ran(
    api: client.ResourceV1Api,
) -> None:
    """While a handler runs, resource_version is still short of its event: has_seen relies on it."""
    seen_in_handler: list[tuple[str, str]] = []
    informer: Informer

    def handler(kind: EventType, obj: Object) -> None:
        del kind
        seen_in_handler.append((obj["metadata"]["resourceVersion"], informer.resource_version))

    informer = Informer(api.list_resource_slice, name="t", handler=handler)
    informer.start()
    try:
        assert informer.wait_synced(5)
        written = raw.call(api.create_resource_slice, slice_("s1", "n1"))
        deadline = time.monotonic() + 5
        while informer.resource_version != written["metadata"]["resourceVersion"]:
            assert time.monotonic() < deadline, "the watch never delivered the write"
            time.sleep(0.01)
        ((event_version, during),) = seen_in_handler
        assert event_version == written["metadata"]["resourceVersion"]
        assert during != event_version
    finally:
        informer.stop()


def test_a_relist_reads_pages_and_caches_each_object_transformed(
    server: FakeApiServer, api: client.ResourceV1Api
) -> None:
    """Five objects in pages of two: three lists, each object cached transformed, version kept."""
    for index in range(5):
        raw.call(api.create_resource_slice, slice_(f"s{index}", f"n{index}"))
    pages: list[dict[str, str]] = []
    server.faults.inject(
        verb="list", when=lambda request: pages.append(dict(request.query)) is not None
    )

    def slim(obj: Object) -> Object:
        return {"metadata": {"name": obj["metadata"]["name"]}, "kept": obj["spec"]["nodeName"]}

    recorder = Recorder()
    informer = Informer(
        api.list_resource_slice, name="t", handler=recorder, transform=slim, page_size=2
    )
    informer.start()
    try:
        assert informer.wait_synced(5)
        assert [p.get("limit") for p in pages] == ["2", "2", "2"]
        assert ["continue" in p for p in pages] == [False, True, True]
        assert [o["kept"] for o in informer.list()] == [f"n{i}" for i in range(5)]
        # The watch resumes from the version the pages were listed at.
        listed = raw.call(api.list_resource_slice)["metadata"]["resourceVersion"]
        assert informer.resource_version == listed
        raw.call(api.create_resource_slice, slice_("s9", "n9"))
        recorder.wait_for(6)
        assert informer.get("", "s9") == {"metadata": {"name": "s9"}, "kept": "n9"}
    finally:
        informer.stop()


def test_an_expired_continue_token_starts_the_relist_over(
    server: FakeApiServer, api: client.ResourceV1Api
) -> None:
    """A 410 on a later page (the snapshot expired) relists from the first page, losing none."""
    for index in range(5):
        raw.call(api.create_resource_slice, slice_(f"s{index}", f"n{index}"))
    server.faults.inject(
        verb="list", when=lambda request: "continue" in request.query, status=410, times=1
    )
    informer = Informer(api.list_resource_slice, name="t", page_size=2)
    informer.start()
    try:
        assert informer.wait_synced(10)
        assert [o["metadata"]["name"] for o in informer.list()] == [f"s{i}" for i in range(5)]
    finally:
        informer.stop()


def test_a_change_only_to_dropped_fields_is_not_handed_on(api: client.ResourceV1Api) -> None:
    """With a transform that drops labels, relabelling fires nothing; a kept field fires."""
    raw.call(api.create_resource_slice, slice_("s1", "n1"))

    def without_labels(obj: Object) -> Object:
        return {"metadata": {"name": obj["metadata"]["name"]}, "spec": obj["spec"]}

    recorder = Recorder()
    informer = Informer(
        api.list_resource_slice, name="t", handler=recorder, transform=without_labels
    )
    informer.start()
    try:
        assert informer.wait_synced(5)
        raw.call(api.patch_resource_slice, "s1", {"metadata": {"labels": {"x": "y"}}})
        raw.call(api.patch_resource_slice, "s1", {"spec": {"nodeName": "n1"}})  # no change
        generation = {"spec": {"pool": {"name": "n1", "generation": 2, "resourceSliceCount": 1}}}
        raw.call(api.patch_resource_slice, "s1", generation)
        events = recorder.wait_for(2)
        time.sleep(0.2)  # nothing else may arrive
        assert recorder.events == events == [("ADDED", "s1"), ("MODIFIED", "s1")]
        stored = informer.get("", "s1")
        assert stored is not None
        assert stored["spec"]["pool"]["generation"] == 2
    finally:
        informer.stop()


def test_an_optional_resource_not_served_is_an_empty_synced_cache(
    api: client.ResourceV1Api,
) -> None:
    """optional=True: a 404 list (DeviceTaintRule, gate off) syncs empty; without it, never."""
    optional = Informer(api.list_device_taint_rule, name="rules", optional=True)
    required = Informer(api.list_device_taint_rule, name="rules-required")
    for informer in (optional, required):
        informer.start()
    try:
        assert optional.wait_synced(5)
        assert optional.list() == []
        assert not required.wait_synced(0.5)
        assert optional.stalled() is None
    finally:
        optional.stop()
        required.stop()


def test_an_optional_resource_served_later_is_listed_and_watched(
    api: client.ResourceV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the API server serves the resource, the next try lists it and watches it."""
    monkeypatch.setattr(informer_module, "UNSERVED_RETRY_SECONDS", 0.2)
    raw.call(api.create_resource_slice, slice_("s1", "n1"))
    served = threading.Event()

    def list_func(**kwargs: object) -> object:
        if not served.is_set():
            served.set()  # the first call 404s, as for a gate turned on later
            raise client.ApiException(status=404, reason="Not Found")
        return api.list_resource_slice(**kwargs)

    recorder = Recorder()
    informer = Informer(
        list_func, name="later", handler=recorder, optional=True, timeouts=ApiTimeouts()
    )
    informer.start()
    try:
        assert recorder.wait_for(1) == [("ADDED", "s1")]
        raw.call(api.create_resource_slice, slice_("s2", "n2"))
        assert recorder.wait_for(2)[1] == ("ADDED", "s2")
    finally:
        informer.stop()
