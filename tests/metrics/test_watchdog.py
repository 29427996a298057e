"""Watchdogs: a loop with work and no progress fails /livez, naming itself; idle loops never do."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.k8s.informer import Informer
from dra_driver.k8s.reconcile import ReconcileLoop, Requeue
from dra_driver.k8s.settings import ApiTimeouts
from dra_driver.metrics import ObservabilityServer
from dra_driver.metrics.watchdog import liveness_checks, register_silence


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def blocked() -> Iterator[threading.Event]:
    release = threading.Event()
    yield release
    release.set()


def stuck_loop(
    clock: Clock, release: threading.Event, entered: threading.Event
) -> ReconcileLoop[str]:
    def reconcile(key: str) -> None:
        entered.set()
        release.wait(30)

    return ReconcileLoop("allocate", reconcile, stall_limit=90, clock=clock)


def test_a_pass_that_never_ends_stalls_the_loop_and_names_the_key(
    clock: Clock, blocked: threading.Event
) -> None:
    """A reconcile running past the limit makes the loop stalled, naming key and duration."""
    entered = threading.Event()
    loop = stuck_loop(clock, blocked, entered)
    loop.start()
    try:
        loop.queue.add("default/p1")
        assert entered.wait(10)
        clock.now += 60
        assert loop.stalled() is None
        clock.now += 31
        assert loop.stalled() == ("reconciling default/p1 for 91 s without progress (limit 90 s)")
        blocked.set()
        loop.queue.add("default/p2")  # taken once the first pass is done
        for _ in range(500):
            if loop.stalled() is None:
                break
            threading.Event().wait(0.01)
        assert loop.stalled() is None
    finally:
        blocked.set()
        loop.stop()


def test_an_idle_loop_or_one_waiting_for_a_delayed_key_never_stalls(clock: Clock) -> None:
    """Nothing to do, or only a key due later, is rest, not a stall, however long it lasts."""
    done = threading.Event()

    def reconcile(key: str) -> None:
        done.set()
        raise Requeue(3600, "look again in an hour")

    loop: ReconcileLoop[str] = ReconcileLoop("release", reconcile, stall_limit=5, clock=clock)
    loop.start()
    try:
        clock.now += 100
        assert loop.stalled() is None
        loop.queue.add("k")
        assert done.wait(10)
        for _ in range(500):
            if not loop._passes:
                break
            threading.Event().wait(0.01)
        clock.now += 1000
        assert loop.stalled() is None
    finally:
        loop.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_thread_that_died_stalls_the_loop() -> None:
    """A worker ended by something no handler catches is reported, not silently gone."""

    def reconcile(key: str) -> None:
        raise SystemExit("a worker must never end like this")

    loop: ReconcileLoop[str] = ReconcileLoop("allocate", reconcile)
    loop.start()
    try:
        loop.queue.add("k")
        for _ in range(500):
            if loop.stalled() is not None:
                break
            threading.Event().wait(0.01)
        assert loop.stalled() == "worker allocate-0 ended"
    finally:
        loop.stop()


def test_an_informer_silent_past_its_limit_is_stalled(clock: Clock) -> None:
    """An informer with no event, bookmark or reconnect for too long reports what it waited on."""
    timeouts = ApiTimeouts(connect=1, request=2, watch=3)
    with FakeApiServer() as server, server.api_client(timeouts) as api_client:
        server.bookmark_interval = 600
        informer = Informer(client.CoreV1Api(api_client).list_namespace, name="ns", clock=clock)
        informer.start()
        try:
            assert informer.wait_synced(10)
            limit = timeouts.watch_stall_limit
            clock.now += limit
            assert informer.stalled() is None
            clock.now += 1
            assert informer.stalled() == (
                f"watching for {limit + 1:.0f} s without progress (limit {limit:.0f} s)"
            )
        finally:
            informer.stop()
        assert informer.stalled() is None  # a stopped informer is not stuck


def test_livez_fails_naming_the_stalled_loop_and_metrics_show_its_silence(
    clock: Clock, blocked: threading.Event
) -> None:
    """/livez answers 503 with the loop's reason; the silence gauge shows its seconds."""
    entered = threading.Event()
    loop = stuck_loop(clock, blocked, entered)
    registry = CollectorRegistry()
    register_silence(registry, lambda: [loop])
    server = ObservabilityServer(
        registry, component="test", host="127.0.0.1", port=0, liveness=liveness_checks([loop])
    )
    server.start()
    loop.start()
    try:
        loop.queue.add("default/p1")
        assert entered.wait(10)
        clock.now += 120
        url = f"http://127.0.0.1:{server.port}/livez"
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(url, timeout=5)
        with failed.value as response:
            assert response.code == 503
            body = response.read().decode()
        assert "[-]allocate failed: reconciling default/p1 for 120 s" in body
        assert registry.get_sample_value(
            "gpushare_loop_seconds_since_progress", {"loop": "allocate"}
        ) == pytest.approx(120)
    finally:
        blocked.set()
        loop.stop()
        server.stop()
