"""A reconcile loop: worker threads taking keys from a work queue until stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar

from dra_driver.k8s.errors import ApiError, ConflictError, NotFoundError
from dra_driver.k8s.settings import ApiTimeouts
from dra_driver.k8s.workqueue import WorkQueue
from dra_driver.logging import bound, carry, get_logger
from dra_driver.metrics.watchdog import stall_reason

K = TypeVar("K", bound=Hashable)

log = get_logger(__name__)

_STOP_SECONDS: Final = 10.0
_PASS_CALLS: Final = 3
"""API calls in a row that one reconcile pass may spend waiting out their timeouts."""


def _text(key: Hashable) -> str:
    """Write a key as an operator reads it: ``default/infer-0`` for a (namespace, name)."""
    if isinstance(key, tuple) and all(isinstance(part, str) for part in key):
        return "/".join(part for part in key if part) or "(catch-up)"
    return str(key)


class Requeue(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a reconciler to look at the key again after ``delay`` seconds."""

    def __init__(self, delay: float, why: str) -> None:
        super().__init__(why)
        self.delay = delay


class ReconcileLoop(Generic[K]):
    """Runs ``reconcile(key)`` for every queued key, retrying failures with backoff.

    A conflict means our view was stale: retried promptly. A vanished object needs no retry.
    Any other failure is logged and retried with exponential backoff, so one bad object never
    stops the loop.

    The loop is watched: it *stalls* when one pass takes longer than ``stall_limit`` seconds
    (by default what a few API calls may take, each running into its timeout), or when keys
    are ready and no worker has taken one for that long.
    """

    def __init__(
        self,
        name: str,
        reconcile: Callable[[K], None],
        workers: int = 1,
        *,
        stall_limit: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.queue: WorkQueue[K] = WorkQueue(clock)
        self.stall_limit = ApiTimeouts().calls(_PASS_CALLS) if stall_limit is None else stall_limit
        self._reconcile = reconcile
        self._clock = clock
        self._lock = threading.Lock()
        self._passes: dict[int, tuple[K, float]] = {}
        """Per worker thread: the key it reconciles and since when."""
        self._last_taken = clock()
        self._running = False
        self._threads = [
            threading.Thread(target=carry(self._work), name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]

    def start(self) -> None:
        """Start the workers."""
        self._last_taken = self._clock()
        self._running = True
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = _STOP_SECONDS) -> None:
        """Stop taking keys and wait (at most ``timeout``) for the workers' current passes.

        A pass stuck on a request is left to its daemon thread: every write is built to
        survive being cut short, as by a crash, so stopping need not wait out its timeout.
        """
        self._running = False
        self.queue.shutdown()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("reconcile.stop_timeout", loop=self.name, worker=thread.name)

    # -- the watchdog's view -------------------------------------------------------------

    def silent_seconds(self) -> float:
        """Seconds since a worker last took a key, or since the oldest running pass began."""
        now = self._clock()
        with self._lock:
            oldest = min((since for _, since in self._passes.values()), default=now)
            return max(0.0, now - (oldest if self._passes else self._last_taken))

    def stalled(self) -> str | None:
        """Why the loop counts as stuck, or ``None`` while it moves or has nothing to do."""
        if not self._running:
            return None
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead:
            return f"worker {', '.join(dead)} ended"
        now = self._clock()
        with self._lock:
            passes = sorted(self._passes.values(), key=lambda entry: entry[1])
            last_taken = self._last_taken
        if passes:
            key, since = passes[0]
            return stall_reason(now - since, self.stall_limit, f"reconciling {_text(key)}")
        ready = self.queue.ready()
        if ready:
            return stall_reason(
                now - last_taken, self.stall_limit, f"{ready} key(s) waiting, none taken"
            )
        return None

    # -- the workers ---------------------------------------------------------------------

    def _work(self) -> None:
        ident = threading.get_ident()
        while (key := self.queue.get()) is not None:
            with self._lock:
                self._last_taken = self._clock()
                self._passes[ident] = (key, self._last_taken)
            try:
                with bound(loop=self.name, key=str(key)):
                    self._reconcile(key)
                self.queue.forget(key)
            except Requeue as signal:
                self.queue.add_after(key, signal.delay)
            except NotFoundError:
                self.queue.forget(key)
            except ConflictError:
                self.queue.add_after(key, 0.01)
            except ApiError as exc:
                delay = self.queue.retry(key)
                log.warning(
                    "reconcile.retry", loop=self.name, key=str(key), error=str(exc), delay=delay
                )
            except Exception:  # one bad object must not stop the loop
                delay = self.queue.retry(key)
                log.exception("reconcile.failed", loop=self.name, key=str(key), delay=delay)
            finally:
                with self._lock:
                    self._passes.pop(ident, None)
                    self._last_taken = self._clock()
                self.queue.done(key)
