"""Every request is bounded: a silent server costs one timeout, never a hang, and never many."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.client import TimedApiClient
from dra_driver.k8s.errors import RetryableError
from dra_driver.k8s.informer import Informer
from dra_driver.k8s.settings import ApiTimeouts, KubeClientSettings
from dra_driver.settings import InvalidSettingError

SHORT = ApiTimeouts(connect=1.0, request=0.5, watch=1)
# What a test allows a bounded wait: far above any timeout here, far below "for ever".
BOUND = 10.0


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


@pytest.fixture
def api_client(server: FakeApiServer) -> Iterator[TimedApiClient]:
    with server.api_client(SHORT) as api_client:
        yield api_client


def timed(call: Callable[[], object]) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def wait_until(condition: Callable[[], bool], timeout: float = BOUND) -> float:
    """Poll ``condition``; return the seconds it took, fail after ``timeout``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "condition not met in time"
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_call_without_its_own_timeout_fails_once_the_server_stays_silent(
    server: FakeApiServer, api_client: TimedApiClient
) -> None:
    """A generated call that passes no timeout fails with a Timeout after the client default."""
    core = client.CoreV1Api(api_client)
    server.faults.inject(verb="get", resource="namespaces", hang=True, times=1)
    seconds, error = timed(lambda: raw.call(core.read_namespace, "default"))
    assert isinstance(error, RetryableError)
    assert error.reason == "Timeout"
    assert SHORT.request <= seconds < BOUND


def test_a_timed_out_read_is_sent_once_not_retried_on_other_connections(
    server: FakeApiServer, api_client: TimedApiClient
) -> None:
    """urllib3 does not resend a request whose answer timed out: the caller decides."""
    core = client.CoreV1Api(api_client)
    hang = server.faults.inject(verb="get", resource="namespaces", hang=True)
    server.reset_requests()
    with pytest.raises(RetryableError):
        raw.call(core.read_namespace, "default")
    assert hang.hits == 1
    assert server.requests[("get", "namespaces")] == 1


def test_a_write_that_landed_but_whose_answer_never_came_times_out(
    server: FakeApiServer, api_client: TimedApiClient
) -> None:
    """A hang after the write: the object exists, the client sees a Timeout it must read back."""
    core = client.CoreV1Api(api_client)
    server.faults.inject(verb="create", resource="namespaces", hang=True, after=True, times=1)
    with pytest.raises(RetryableError, match="timed out"):
        raw.call(core.create_namespace, namespace("landed"))
    assert raw.call(core.read_namespace, "landed")["metadata"]["name"] == "landed"


def test_black_holed_connections_cost_one_timeout_then_a_fresh_connection_works(
    server: FakeApiServer, api_client: TimedApiClient
) -> None:
    """After a partition of the open connections, one request times out, the next one succeeds."""
    core = client.CoreV1Api(api_client)
    # Fill the pool with idle connections, as a busy component's pool is.
    threads = [threading.Thread(target=raw.call, args=(core.list_namespace,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert server.blackhole() >= 1
    seconds, error = timed(lambda: raw.call(core.read_namespace, "default"))
    assert isinstance(error, RetryableError)
    assert seconds < BOUND
    # Every other pooled connection is as dead as the first: none of them is tried again.
    seconds, error = timed(lambda: raw.call(core.read_namespace, "default"))
    assert error is None
    assert seconds < SHORT.request


@contextmanager
def namespaces(server: FakeApiServer, api_client: TimedApiClient) -> Iterator[Informer]:
    """Yield a synced informer of namespaces, on a server whose silent watches stay silent."""
    server.bookmark_interval = 600
    informer = Informer(client.CoreV1Api(api_client).list_namespace, name="t")
    informer.start()
    try:
        assert informer.wait_synced(BOUND)
        yield informer
    finally:
        informer.stop()


def test_an_informer_recovers_from_a_watch_that_never_sends_anything(
    server: FakeApiServer, api_client: TimedApiClient
) -> None:
    """A watch stuck without events or bookmarks is renewed after its read timeout."""
    hung = server.faults.inject(verb="watch", resource="namespaces", hang=True, times=1)
    with namespaces(server, api_client) as informer:
        wait_until(lambda: hung.hits == 1)
        raw.call(client.CoreV1Api(api_client).create_namespace, namespace("later"))
        wait_until(lambda: informer.get("", "later") is not None)
        assert informer.stalled() is None


def test_an_informer_recovers_from_a_black_holed_watch(
    server: FakeApiServer, api_client: TimedApiClient
) -> None:
    """A watch whose connection went silent mid-stream is counted dead and renewed."""
    with namespaces(server, api_client) as informer:
        raw.call(client.CoreV1Api(api_client).create_namespace, namespace("before"))
        wait_until(lambda: informer.get("", "before") is not None)
        assert server.blackhole() >= 1
        with server.api_client(SHORT) as fresh:  # the test's own connections went silent too
            raw.call(client.CoreV1Api(fresh).create_namespace, namespace("after"))
        wait_until(lambda: informer.get("", "after") is not None)


def test_stop_is_prompt_when_it_comes_just_before_the_watch_is_recorded(
    server: FakeApiServer, api_client: TimedApiClient
) -> None:
    """A stop between the watch's answer and its first line ends the thread without waiting."""
    server.bookmark_interval = 600
    core = client.CoreV1Api(api_client)
    answered, stopped = threading.Event(), threading.Event()

    def list_namespace(**kwargs: Any) -> Any:
        response = core.list_namespace(**kwargs)
        if kwargs.get("watch"):
            answered.set()
            stopped.wait(BOUND)
        return response

    list_namespace.__self__ = core  # type: ignore[attr-defined]  # as a bound method has
    informer = Informer(list_namespace, name="t", timeouts=ApiTimeouts(watch=600))
    informer.start()
    assert answered.wait(BOUND)
    informer.request_stop()  # no response recorded yet: nothing to shut down
    stopped.set()
    seconds, _ = timed(lambda: informer.stop(timeout=BOUND))
    assert seconds < 2.0


@pytest.mark.parametrize("field", ["api_connect_timeout", "api_timeout", "watch_timeout"])
def test_a_timeout_setting_must_be_positive(field: str) -> None:
    """Zero or negative timeouts are refused, naming the setting."""
    with pytest.raises(InvalidSettingError, match=field):
        KubeClientSettings(**{field: 0})


def test_watch_read_timeout_exceeds_the_server_side_timeout() -> None:
    """The client waits longer for a watch than the API server keeps it open."""
    timeouts = ApiTimeouts(watch=30)
    assert timeouts.watch_read > timeouts.watch
    assert timeouts.per_watch == (timeouts.connect, timeouts.watch_read)
