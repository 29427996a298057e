"""Lease leader election: one leader, prompt hand-over on stop, one term per elector."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer

from dra_driver.k8s.leader import LeaderElectionSettings, LeaderElector

LEASE = "gpushare-controller"
NAMESPACE = "default"


class Callbacks:
    """Counts the elector's callbacks; lets a test wait for a count."""

    def __init__(self, *, fail_start: bool = False) -> None:
        self.started = 0
        self.stopped = 0
        self.fail_start = fail_start
        self.changed = threading.Condition()

    def on_started(self) -> None:
        with self.changed:
            self.started += 1
            self.changed.notify_all()
        if self.fail_start:
            raise RuntimeError("the controller failed to start")

    def on_stopped(self) -> None:
        with self.changed:
            self.stopped += 1
            self.changed.notify_all()

    def wait(self, predicate: Callable[[Callbacks], bool], timeout: float) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: predicate(self), timeout), vars(self)


def eventually(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll until ``predicate`` holds or ``timeout`` passes; return whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def holder(server: FakeApiServer) -> str | None:
    lease = server.get("leases", NAMESPACE, LEASE)
    assert lease is not None
    identity: str | None = lease["spec"].get("holderIdentity")
    return identity


def election_threads() -> list[str]:
    """Name the live threads of electors and of the official election's callbacks."""
    return [t.name for t in threading.enumerate() if "lead" in t.name]


@pytest.fixture
def make_elector(
    server: FakeApiServer,
) -> Iterator[Callable[..., tuple[LeaderElector, Callbacks]]]:
    """Build started electors on one ApiClient; stop them all at teardown."""
    electors: list[LeaderElector] = []
    with server.api_client() as api_client:

        def make(
            identity: str, *, lease_duration: int = 3, fail_start: bool = False
        ) -> tuple[LeaderElector, Callbacks]:
            settings = LeaderElectionSettings(
                LEASE, NAMESPACE, identity, lease_duration=lease_duration, renew_deadline=2,
                retry_period=1,
            )  # fmt: skip
            callbacks = Callbacks(fail_start=fail_start)
            elector = LeaderElector(
                api_client,
                settings,
                on_started_leading=callbacks.on_started,
                on_stopped_leading=callbacks.on_stopped,
            )
            electors.append(elector)
            elector.start()
            return elector, callbacks

        yield make
        for elector in electors:
            elector.stop()
    assert not election_threads()


def test_single_elector_leads_and_releases_on_stop(
    server: FakeApiServer, make_elector: Callable[..., tuple[LeaderElector, Callbacks]]
) -> None:
    """A lone elector leads, the Lease names it, and stop() ends the term once and frees it."""
    elector, callbacks = make_elector("replica-a")
    callbacks.wait(lambda c: c.started == 1, timeout=5)
    assert elector.is_leader
    assert holder(server) == "replica-a"
    lease = server.get("leases", NAMESPACE, LEASE)
    assert lease is not None
    assert lease["spec"]["leaseDurationSeconds"] == 3

    started = time.monotonic()
    elector.stop()
    assert time.monotonic() - started < 3  # about one retry_period, not a lease duration
    assert not elector.is_leader
    assert (callbacks.started, callbacks.stopped) == (1, 1)
    assert holder(server) is None
    elector.stop()  # idempotent: no second on_stopped_leading
    assert callbacks.stopped == 1


def test_two_electors_one_leads_and_the_other_takes_over_after_stop(
    server: FakeApiServer, make_elector: Callable[..., tuple[LeaderElector, Callbacks]]
) -> None:
    """Exactly one of two electors leads; on its stop() the other leads well within the lease."""
    # A long lease: taking over in less than it proves the stopped leader released the Lease.
    a = make_elector("replica-a", lease_duration=8)
    b = make_elector("replica-b", lease_duration=8)
    assert eventually(lambda: a[0].is_leader or b[0].is_leader, timeout=5)
    (leader, leader_calls), (follower, follower_calls) = (a, b) if a[0].is_leader else (b, a)
    assert not eventually(lambda: follower.is_leader, timeout=1.5)  # both see the same Lease
    assert follower_calls.started == 0
    assert holder(server) == ("replica-a" if leader is a[0] else "replica-b")

    leader.stop()
    stopped_at = time.monotonic()
    follower_calls.wait(lambda c: c.started == 1, timeout=4)
    assert time.monotonic() - stopped_at < 4  # < lease_duration (8): released, not expired
    assert follower.is_leader
    assert not leader.is_leader
    assert leader_calls.stopped == 1
    assert holder(server) == ("replica-b" if leader is a[0] else "replica-a")


def test_stopped_follower_never_starts_leading(
    server: FakeApiServer, make_elector: Callable[..., tuple[LeaderElector, Callbacks]]
) -> None:
    """After stop(), a follower never leads, not even once the Lease becomes free."""
    leader, _ = make_elector("replica-a")
    assert eventually(lambda: leader.is_leader, timeout=5)
    follower, follower_calls = make_elector("replica-b")
    assert not eventually(lambda: follower_calls.started > 0, timeout=1)
    follower.stop()
    leader.stop()
    assert holder(server) is None
    # A campaigning elector would take the free Lease within one retry_period (1 s).
    assert not eventually(lambda: holder(server) is not None, timeout=2.5)
    assert (follower_calls.started, follower_calls.stopped) == (0, 0)
    assert not follower.is_leader


def test_failed_renewals_lose_leadership_once_and_for_good(
    server: FakeApiServer, make_elector: Callable[..., tuple[LeaderElector, Callbacks]]
) -> None:
    """Renewals failing past renew_deadline end the term once; the elector never leads again."""
    elector, callbacks = make_elector("replica-a")
    callbacks.wait(lambda c: c.started == 1, timeout=5)
    reads = server.faults.inject(verb="get", resource="leases", status=500)
    writes = server.faults.inject(verb="update", resource="leases", status=503)
    callbacks.wait(lambda c: c.stopped == 1, timeout=6)  # renew_deadline 2 s + retries
    assert not elector.is_leader
    assert reads.hits + writes.hits > 0
    assert holder(server) == "replica-a"  # the renewals never reached the Lease

    # The term is over: the election thread ends (after one failed attempt to release).
    assert eventually(lambda: not election_threads(), timeout=5)
    server.faults.clear()
    server.reset_requests()
    # The Lease still names this identity: an elector that campaigned again would read and
    # renew it within one retry_period.
    assert not eventually(lambda: any(r == "leases" for _, r in server.requests), timeout=2.5)
    elector.stop()
    assert (callbacks.started, callbacks.stopped) == (1, 1)


def test_dropped_connections_do_not_kill_the_election(
    server: FakeApiServer, make_elector: Callable[..., tuple[LeaderElector, Callbacks]]
) -> None:
    """Transport failures (connections closed unanswered) are retried, not fatal to the thread."""
    # More drops than urllib3's own retries absorb, so the client raises a non-ApiException.
    dropped = server.faults.inject(verb="get", resource="leases", drop=True, times=6)
    elector, callbacks = make_elector("replica-a")
    callbacks.wait(lambda c: c.started == 1, timeout=8)
    assert dropped.hits == 6
    assert elector.is_leader
    assert holder(server) == "replica-a"


def test_failing_on_started_leading_ends_the_term_and_frees_the_lease(
    server: FakeApiServer, make_elector: Callable[..., tuple[LeaderElector, Callbacks]]
) -> None:
    """If on_started_leading raises, on_stopped_leading runs once and the Lease is released."""
    elector, callbacks = make_elector("replica-a", fail_start=True)
    callbacks.wait(lambda c: c.stopped == 1, timeout=6)
    assert not elector.is_leader
    assert eventually(lambda: holder(server) is None, timeout=3)
    assert callbacks.started == 1


def test_on_stopped_leading_may_call_stop(server: FakeApiServer) -> None:
    """A controller calling stop() from on_stopped_leading neither deadlocks nor recurses."""
    stopped: list[str] = []

    def on_stopped() -> None:
        stopped.append("stop")
        elector.stop()

    with server.api_client() as api_client:
        elector = LeaderElector(
            api_client,
            LeaderElectionSettings(LEASE, NAMESPACE, "replica-a", 3, 2, 1),
            on_started_leading=lambda: None,
            on_stopped_leading=on_stopped,
        )
        elector.start()
        try:
            assert eventually(lambda: elector.is_leader, timeout=5)
        finally:
            elector.stop()
    assert stopped == ["stop"]
    assert holder(server) is None
    assert not election_threads()


def test_start_after_stop_is_refused(server: FakeApiServer) -> None:
    """An elector serves one term: start() after stop() raises instead of campaigning again."""
    with server.api_client() as api_client:
        elector = LeaderElector(
            api_client,
            LeaderElectionSettings(LEASE, NAMESPACE, "replica-a"),
            on_started_leading=lambda: None,
            on_stopped_leading=lambda: None,
        )
        elector.stop()
        with pytest.raises(RuntimeError, match="started once"):
            elector.start()
    assert server.get("leases", NAMESPACE, LEASE) is None


@pytest.mark.parametrize(
    ("timings", "field"),
    [
        ({"lease_duration": 0}, "lease_duration"),
        ({"renew_deadline": 0}, "renew_deadline"),
        ({"retry_period": 0}, "retry_period"),
        ({"lease_duration": 10, "renew_deadline": 10}, "lease_duration"),
        ({"renew_deadline": 6, "retry_period": 5}, "renew_deadline"),
    ],
)
def test_bad_timings_raise_value_error_naming_the_field(
    timings: dict[str, int], field: str
) -> None:
    """Timings the official Config would sys.exit() on raise ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        LeaderElectionSettings(LEASE, NAMESPACE, "replica-a", **timings)


def test_empty_identity_and_fractional_seconds_are_refused() -> None:
    """An empty identity is a ValueError; fractional seconds (the lock int()s them) a TypeError."""
    with pytest.raises(ValueError, match="identity"):
        LeaderElectionSettings(LEASE, NAMESPACE, "")
    with pytest.raises(TypeError, match="retry_period"):
        LeaderElectionSettings(LEASE, NAMESPACE, "replica-a", retry_period=1.5)  # type: ignore[arg-type]


def test_the_lease_is_held_firmly_only_while_renewals_are_recent(server: FakeApiServer) -> None:
    """holds_firmly: true after a renewal, false once lease_duration - renew_deadline passed."""
    now = [1000.0]
    with server.api_client() as api_client:
        elector = LeaderElector(
            api_client,
            LeaderElectionSettings(LEASE, NAMESPACE, "replica-a", 5, 2, 1),
            on_started_leading=lambda: None,
            on_stopped_leading=lambda: None,
            clock=lambda: now[0],
        )
        assert not elector.holds_firmly()  # not even campaigning yet
        elector.start()
        try:
            assert eventually(lambda: elector.is_leader, timeout=5)
            assert elector.holds_firmly()
            renewals = server.faults.inject(verb="update", resource="leases", status=503)
            now[0] += 2.9  # the margin is 5 - 2 = 3 seconds
            assert elector.holds_firmly()
            now[0] += 0.2
            assert not elector.holds_firmly()
            server.faults.remove(renewals)
            assert eventually(elector.holds_firmly, timeout=5)  # the next renewal counts
        finally:
            elector.stop()
        assert not elector.holds_firmly()
