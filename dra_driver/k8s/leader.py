"""Lease leader election over the official ``kubernetes.leaderelection``: one active replica.

One term per elector: once leadership is lost (no renewal for ``renew_deadline``) or the elector
is stopped, it never campaigns again. As client-go controllers do, the caller reacts to
``on_stopped_leading`` by stopping its work and exiting; a new process brings a new elector.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection.electionconfig import Config
from kubernetes.leaderelection.leaderelection import LeaderElection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from dra_driver.k8s.errors import ApiError, translate_errors
from dra_driver.logging import carry, get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class LeaderElectionSettings:
    """Which Lease to compete for, as whom, and the election timings in whole seconds."""

    lease_name: str
    namespace: str
    identity: str
    lease_duration: int = 15
    renew_deadline: int = 10
    retry_period: int = 2

    def __post_init__(self) -> None:
        for name in ("lease_name", "namespace", "identity"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        for name in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                # Whole seconds: the official lock stores str(lease_duration) and int()s it back.
                raise TypeError(f"{name} must be a whole number of seconds, got {value!r}")
            if value < 1:
                raise ValueError(f"{name} must be at least 1 second, got {value}")
        duration, deadline, retry = self.lease_duration, self.renew_deadline, self.retry_period
        if duration <= deadline:
            raise ValueError(f"lease_duration ({duration}) must exceed renew_deadline ({deadline})")
        if deadline <= 1.2 * retry:  # the official Config's jitter factor
            raise ValueError(f"renew_deadline ({deadline}) must exceed 1.2x retry_period ({retry})")


class _ElectionStoppedError(Exception):
    """Raised inside the official election loop to end it once stop() was requested."""


class _TimedLeaseApi:
    """The official lock's Lease calls, bounded: a hung connection must not pin the election."""

    def __init__(self, api: client.CoordinationV1Api, timeout: float) -> None:
        self._api, self._timeout = api, timeout

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        return self._api.read_namespaced_lease(name, namespace, _request_timeout=self._timeout)

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease) -> client.V1Lease:
        return self._api.create_namespaced_lease(namespace, body, _request_timeout=self._timeout)

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: client.V1Lease
    ) -> client.V1Lease:
        return self._api.replace_namespaced_lease(
            name, namespace, body, _request_timeout=self._timeout
        )


class _GuardedLeaseLock(LeaseLock):
    """The official ``LeaseLock`` on our API client, which ends the election once stopping.

    Acquiring loops forever on failures, so once stopping the calls raise instead. Transport
    failures become the failed results the election expects; raised, they would kill its thread.
    """

    def __init__(
        self,
        api: _TimedLeaseApi,
        settings: LeaderElectionSettings,
        stopping: threading.Event,
        clock: Callable[[], float],
    ) -> None:
        # Not super().__init__(): it builds a CoordinationV1Api from the process-wide default
        # configuration, whose constructor resets the global urllib3 logger level. These are
        # the attributes the lock and the election use; the API is duck-typed (three methods).
        self.api_instance = api  # type: ignore[assignment]
        self.name = settings.lease_name
        self.namespace = settings.namespace
        self.identity = settings.identity
        self.lease_reference = None
        self._stopping = stopping
        self._clock = clock
        self.held_at: float | None = None
        """When the last write that took or renewed the Lease was sent (``clock`` seconds)."""

    def _attempt(self, call: Callable[..., Any], *args: object) -> Any:  # noqa: ANN401
        """Run one call of the official lock; return a transport failure as an ApiError."""
        if self._stopping.is_set():
            raise _ElectionStoppedError
        try:
            with translate_errors():
                return call(self, *args)
        except ApiError as exc:
            log.warning("leader.lease_request_failed", lease=self.name, error=str(exc))
            return exc

    def get(self, name: str, namespace: str) -> tuple[bool, object]:
        result = self._attempt(LeaseLock.get, name, namespace)
        if isinstance(result, ApiError):
            # No JSON body: the election reads it as "not a 404", fails this try, retries.
            return False, ApiException(status=0, reason=str(result))
        found, record = result
        return bool(found), record

    def create(self, name: str, namespace: str, election_record: object) -> bool:
        return self._held(LeaseLock.create, name, namespace, election_record)

    def update(self, name: str, namespace: str, updated_record: object) -> bool:
        return self._held(LeaseLock.update, name, namespace, updated_record)

    def _held(self, call: Callable[..., Any], *args: object) -> bool:
        """Write our record; on success note when it was sent (the Lease runs from no earlier)."""
        sent = self._clock()
        held = self._attempt(call, *args) is True
        if held:
            self.held_at = sent
        return held


class LeaderElector:
    """Compete for a Lease in a background thread; report gaining and losing it, once each.

    ``on_started_leading`` runs in a thread of the official election and should return soon;
    ``on_stopped_leading`` runs once if, and only if, it ran: on loss in the election thread,
    on :meth:`stop` in the caller's.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        settings: LeaderElectionSettings,
        *,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._log = log.bind(lease=settings.lease_name, identity=settings.identity)
        self._on_started, self._on_stopped = on_started_leading, on_stopped_leading
        self._timeout = settings.renew_deadline / 2  # per request, as kube-controller-manager's
        self._api = _TimedLeaseApi(client.CoordinationV1Api(api_client), self._timeout)
        self._stopping, self._state_lock = threading.Event(), threading.Lock()
        self._stop_lock = threading.RLock()  # on_stopped_leading may call stop()
        self._leading = self._term_over = False
        self._thread: threading.Thread | None = None
        self._callback_thread: threading.Thread | None = None  # where on_started_leading ran
        self._lease_lock = lock = _GuardedLeaseLock(self._api, settings, self._stopping, clock)
        config = Config(  # type: ignore[no-untyped-call]  # the official package is untyped
            lock, settings.lease_duration, settings.renew_deadline, settings.retry_period,
            self._started, functools.partial(self._end_term, "lost"),
        )  # fmt: skip
        self._election = LeaderElection(config)  # type: ignore[no-untyped-call]

    @property
    def is_leader(self) -> bool:
        """Whether this elector holds the Lease now (as far as it knows)."""
        return self._leading

    def holds_firmly(self) -> bool:
        """Whether no other replica can lead before our writes sent now have landed.

        A rival takes the Lease only ``lease_duration`` after it last saw us renew, and we
        quit ``renew_deadline`` after our last renewal at the latest. A write sent within
        ``lease_duration - renew_deadline`` of a renewal therefore has at least
        ``renew_deadline`` (10 s by default) to land before anyone else can decide: the
        assumption every leader-elected Kubernetes controller makes about requests in flight.
        """
        held_at = self._lease_lock.held_at
        margin = self._settings.lease_duration - self._settings.renew_deadline
        return (
            self._leading
            and not self._stopping.is_set()
            and held_at is not None
            and self._clock() - held_at < margin
        )

    def start(self) -> None:
        """Start campaigning in a daemon thread; return at once."""
        with self._state_lock:
            if self._thread is not None or self._stopping.is_set():
                raise RuntimeError("a LeaderElector can be started once, and not after stop()")
            name = f"leader-{self._settings.lease_name}"
            self._thread = threading.Thread(target=carry(self._run), name=name, daemon=True)
        self._log.info("leader.campaigning")
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning; if leading, call ``on_stopped_leading``; release the Lease if held.

        Returns within about ``retry_period`` (plus one request timeout at worst). Idempotent.
        """
        with self._stop_lock:
            with self._state_lock:
                first, thread = not self._stopping.is_set(), self._thread
                self._stopping.set()
            if thread is not None and thread is not threading.current_thread():
                thread.join(self._settings.retry_period + self._timeout + 1)
                if thread.is_alive():
                    self._log.warning("leader.stop_timeout")
            self._end_term("stopped")
            # Even if on_started_leading never ran: the election may have just taken the Lease.
            if first and thread is not None:
                self._release()
            callback_thread = self._callback_thread
            if callback_thread is not None and callback_thread is not threading.current_thread():
                callback_thread.join(self._settings.retry_period)

    def _run(self) -> None:
        try:
            self._election.run()  # type: ignore[no-untyped-call]
        except _ElectionStoppedError:
            return  # stop() ends the term and releases the Lease.
        except Exception:  # noqa: BLE001  # logged: it is the thread's last word
            self._log.exception("leader.election_failed")
            self._end_term("lost")  # no more renewals either way
        # A lost term (ended by _end_term). If on_started_leading raised, the Lease is ours.
        self._release()

    def _started(self) -> None:
        with self._state_lock:
            if self._stopping.is_set() or self._term_over:
                return
            self._leading = True
            self._callback_thread = threading.current_thread()
        self._log.info("leader.acquired")
        try:
            self._on_started()
        except Exception:
            self._log.exception("leader.on_started_leading_failed")
            raise  # the official election then stops renewing and ends the term

    def _end_term(self, why: str) -> None:
        """End the term (never to lead again); call on_stopped_leading if this elector led."""
        with self._state_lock:
            was_leading, self._leading, self._term_over = self._leading, False, True
        if not was_leading:
            return
        # A loss is the surprise worth a warning; a stop was asked for.
        (self._log.warning if why == "lost" else self._log.info)("leader.stopped_leading", why=why)
        try:
            self._on_stopped()
        except Exception:  # noqa: BLE001  # logged; the Lease must still be released
            self._log.exception("leader.on_stopped_leading_failed")

    def _release(self) -> None:
        """Clear our holderIdentity so another replica takes over at once instead of waiting."""
        name, namespace = self._settings.lease_name, self._settings.namespace
        try:
            with translate_errors():
                lease = self._api.read_namespaced_lease(name, namespace)
                # Replaced at this read's resourceVersion: never clears a Lease taken meanwhile.
                if lease.spec is None or lease.spec.holder_identity != self._settings.identity:
                    return
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                lease.spec.renew_time = datetime.now(UTC)
                self._api.replace_namespaced_lease(name, namespace, lease)
        except ApiError as exc:
            self._log.warning("leader.release_failed", error=str(exc))
        else:
            self._log.info("leader.released")
