"""Watch semantics of the fake API server through ``kubernetes.watch.Watch``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from gpushare_simulator.harness.apiserver import FakeApiServer
from harness.apiserver.builders import claim, pod, resource_slice
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

CLAIM = "ResourceV1ResourceClaim"


def later(action: Callable[[], Any], delay: float = 0.2) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), action()), daemon=True)
    thread.start()
    return thread


def events_of(stream: Any, count: int) -> list[tuple[str, str]]:
    """Collect ``count`` events, then close the stream (returning its connection at once)."""
    seen = []
    try:
        for event in stream:
            seen.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
            if len(seen) == count:
                break
    finally:
        stream.close()
    return seen


def test_watch_streams_added_modified_deleted(resource_api: client.ResourceV1Api) -> None:
    """A watch sees the initial object as ADDED, then MODIFIED and DELETED, with growing RVs."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))

    def change() -> None:
        resource_api.patch_namespaced_resource_claim(
            "c1", "default", {"metadata": {"labels": {"a": "b"}}}
        )
        resource_api.delete_namespaced_resource_claim("c1", "default")

    thread = later(change)
    stream = watch.Watch(return_type=CLAIM).stream(
        resource_api.list_namespaced_resource_claim, "default", timeout_seconds=5
    )
    seen, versions = [], []
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        versions.append(int(event["object"].metadata.resource_version))
        if len(seen) == 3:
            break
    stream.close()
    thread.join()
    assert seen == [("ADDED", "c1"), ("MODIFIED", "c1"), ("DELETED", "c1")]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


def test_watch_from_a_resource_version_replays_later_events(
    resource_api: client.ResourceV1Api,
) -> None:
    """Watching from a list's resourceVersion replays exactly the later events, no ADDED burst."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    listed = resource_api.list_namespaced_resource_claim("default")
    resource_api.create_namespaced_resource_claim("default", claim("c2"))
    resource_api.delete_namespaced_resource_claim("c1", "default")
    stream = watch.Watch(return_type=CLAIM).stream(
        resource_api.list_namespaced_resource_claim,
        "default",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    )
    assert events_of(stream, 2) == [("ADDED", "c2"), ("DELETED", "c1")]


def test_finalizer_deletion_is_modified_then_deleted(resource_api: client.ResourceV1Api) -> None:
    """Deleting a finalized claim is MODIFIED (deletionTimestamp); unfinalizing it DELETED."""
    start = resource_api.create_namespaced_resource_claim(
        "default", claim("c1", finalizers=["gpushare.dra.dev/allocation"])
    ).metadata.resource_version
    resource_api.delete_namespaced_resource_claim("c1", "default")
    resource_api.patch_namespaced_resource_claim(
        "c1",
        "default",
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["gpushare.dra.dev/allocation"]}},
    )
    stream = watch.Watch(return_type=CLAIM).stream(
        resource_api.list_namespaced_resource_claim,
        "default",
        resource_version=start,
        timeout_seconds=2,
    )
    events = []
    for event in stream:
        meta = event["object"].metadata
        events.append((event["type"], meta.deletion_timestamp is not None, meta.finalizers))
        if len(events) == 2:
            break
    stream.close()
    assert events == [
        ("MODIFIED", True, ["gpushare.dra.dev/allocation"]),
        ("DELETED", True, None),
    ]


def test_compacted_history_gives_410_and_relist_recovers(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """A watch from a compacted RV raises ApiException 410; relist + watch sees new events."""
    old = resource_api.create_namespaced_resource_claim(
        "default", claim("c1")
    ).metadata.resource_version
    resource_api.create_namespaced_resource_claim("default", claim("c2"))
    server.compact()
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch(return_type=CLAIM).stream(
            resource_api.list_namespaced_resource_claim, "default", resource_version=old
        ):
            pass
    assert caught.value.status == 410
    assert f"too old resource version: {old} ({server.resource_version})" in caught.value.reason
    listed = resource_api.list_namespaced_resource_claim("default")
    assert [c.metadata.name for c in listed.items] == ["c1", "c2"]
    thread = later(lambda: resource_api.create_namespaced_resource_claim("default", claim("c3")))
    stream = watch.Watch(return_type=CLAIM).stream(
        resource_api.list_namespaced_resource_claim,
        "default",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    )
    assert events_of(stream, 1) == [("ADDED", "c3")]
    thread.join()


def test_expired_event_is_the_servers_status(server: FakeApiServer) -> None:
    """The 410 arrives as an ERROR event carrying an Expired Status, as the server sends it."""
    server.create(claim("c1"))
    server.compact()
    http = urllib3.PoolManager()
    response = http.request(
        "GET",
        f"{server.url}/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
        "?watch=true&resourceVersion=1&timeoutSeconds=1",
    )
    event = json.loads(response.data.splitlines()[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"
    assert event["object"]["message"] == f"too old resource version: 1 ({server.resource_version})"
    http.clear()


def test_small_history_expires_old_versions() -> None:
    """With watch_history=2, a watch from before the last two events of a resource is 410."""
    with FakeApiServer(watch_history=2) as server, server.api_client() as api_client:
        api = client.ResourceV1Api(api_client)
        first = api.create_namespaced_resource_claim(
            "default", claim("c1")
        ).metadata.resource_version
        for name in ("c2", "c3", "c4"):
            api.create_namespaced_resource_claim("default", claim(name))
        with pytest.raises(ApiException) as caught:
            for _ in watch.Watch(return_type=CLAIM).stream(
                api.list_namespaced_resource_claim, "default", resource_version=first
            ):
                pass
        assert caught.value.status == 410


def test_label_selector_watch_sends_leave_as_deleted_and_enter_as_added(
    resource_api: client.ResourceV1Api,
) -> None:
    """An object leaving a watch's selector is DELETED for it; one entering is ADDED."""
    resource_api.create_namespaced_resource_claim("default", claim("c1", labels={"team": "a"}))
    resource_api.create_namespaced_resource_claim("default", claim("c2", labels={"team": "b"}))

    def relabel() -> None:
        resource_api.patch_namespaced_resource_claim(
            "c1", "default", {"metadata": {"labels": {"team": "b"}}}
        )
        resource_api.patch_namespaced_resource_claim(
            "c2", "default", {"metadata": {"labels": {"team": "a"}}}
        )

    thread = later(relabel)
    stream = watch.Watch(return_type=CLAIM).stream(
        resource_api.list_namespaced_resource_claim,
        "default",
        label_selector="team=a",
        timeout_seconds=5,
    )
    assert events_of(stream, 3) == [("ADDED", "c1"), ("DELETED", "c1"), ("ADDED", "c2")]
    thread.join()


def test_field_selector_watch_on_slices_by_node(resource_api: client.ResourceV1Api) -> None:
    """A slice watch with spec.nodeName sees only that node's slices."""
    thread = later(
        lambda: [
            resource_api.create_resource_slice(resource_slice(name, node))
            for name, node in (("a", "n2"), ("b", "n1"), ("c", "n2"))
        ]
    )
    stream = watch.Watch().stream(
        resource_api.list_resource_slice, field_selector="spec.nodeName=n2", timeout_seconds=5
    )
    assert events_of(stream, 2) == [("ADDED", "a"), ("ADDED", "c")]
    thread.join()


def test_pod_watch_by_node_name_sees_binding(core_api: client.CoreV1Api) -> None:
    """A kubelet-style pod watch on spec.nodeName sees a pod appear (ADDED) when it gets bound."""
    core_api.create_namespaced_pod("default", pod("p1"))
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p1"),
        target=client.V1ObjectReference(kind="Node", name="n1"),
    )
    thread = later(
        lambda: core_api.create_namespaced_pod_binding(
            "p1", "default", binding, _preload_content=False
        )
    )
    stream = watch.Watch().stream(
        core_api.list_pod_for_all_namespaces, field_selector="spec.nodeName=n1", timeout_seconds=5
    )
    assert events_of(stream, 1) == [("ADDED", "p1")]
    thread.join()


def test_bookmarks_carry_the_current_resource_version(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """allowWatchBookmarks yields BOOKMARK events whose resourceVersion is the server's latest."""
    server.bookmark_interval = 0.1
    resource_api.create_resource_slice(resource_slice("s1", "n1"))
    latest = str(server.resource_version)
    stream = watch.Watch().stream(
        resource_api.list_resource_slice,
        allow_watch_bookmarks=True,
        resource_version=latest,
        timeout_seconds=5,
        deserialize=False,
    )
    event = next(stream)
    stream.close()
    assert event["type"] == "BOOKMARK"
    assert event["object"]["metadata"]["resourceVersion"] == latest
    assert event["object"]["kind"] == "ResourceSlice"


def test_send_initial_events_ends_with_annotated_bookmark(server: FakeApiServer) -> None:
    """sendInitialEvents=true: ADDED for each object, then a BOOKMARK marked initial-events-end."""
    server.create(claim("c1"))
    http = urllib3.PoolManager()
    response = http.request(
        "GET",
        f"{server.url}/apis/resource.k8s.io/v1/resourceclaims?watch=1&sendInitialEvents=true"
        "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
    )
    events = [json.loads(line) for line in response.data.splitlines()]
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}
    http.clear()


def test_legacy_watch_path_and_single_object(server: FakeApiServer) -> None:
    """The /watch/ prefix works, also for one named object."""
    server.create(claim("c1"))
    server.create(claim("c2"))
    http = urllib3.PoolManager()
    response = http.request(
        "GET",
        f"{server.url}/apis/resource.k8s.io/v1/watch/namespaces/default/resourceclaims/c2"
        "?timeoutSeconds=1",
    )
    events = [json.loads(line) for line in response.data.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "c2")]
    http.clear()


def test_timeout_ends_the_stream(resource_api: client.ResourceV1Api) -> None:
    """timeoutSeconds closes the stream on time even without events."""
    started = time.monotonic()
    events = list(watch.Watch().stream(resource_api.list_resource_slice, timeout_seconds=1))
    assert events == []
    assert 0.9 <= time.monotonic() - started < 5


def test_stopped_client_watch_frees_the_server_thread(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """A client that stops watching (closes its socket) does not leave a server thread behind."""
    before = threading.active_count()
    watcher = watch.Watch()
    thread = later(lambda: resource_api.create_resource_slice(resource_slice("s1", "n1")))
    for _ in watcher.stream(resource_api.list_resource_slice, timeout_seconds=30):
        watcher.stop()
    thread.join()
    resource_api.api_client.rest_client.pool_manager.clear()
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before
