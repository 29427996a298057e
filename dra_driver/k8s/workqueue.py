"""A keyed work queue with de-duplication and per-key retry backoff, as in client-go.

A key is queued at most once; a key added while it is being processed is processed again
after ``done``, never by two workers at once. So handlers can be level-triggered: they read
the current state for the key and converge, however many events arrived meanwhile.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_INITIAL_RETRY_SECONDS: Final = 0.05
_MAX_RETRY_SECONDS: Final = 30.0


class WorkQueue(Generic[K]):
    """Keys waiting to be reconciled; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: list[K] = []
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        """When each waiting key is due; heap entries for other times are stale."""
        self._sequence = itertools.count()
        self._failures: dict[K, int] = {}
        self._shutdown = False

    def add(self, key: K) -> None:
        """Queue ``key`` unless it is already waiting; re-queue it after a running pass."""
        with self._cond:
            if self._shutdown:
                return
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)
                self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` once ``delay`` seconds have passed.

        A key waits at most once: a later request that is due sooner moves it earlier, one due
        later is dropped. Without that, every retry of a key that keeps failing would leave
        one more timer behind, and a quiet cluster would reconcile it ever more often.
        """
        due = self._clock() + delay
        with self._cond:
            current = self._due.get(key)
            if current is not None and current <= due:
                return
            self._due[key] = due
            heapq.heappush(self._delayed, (due, next(self._sequence), key))
            self._cond.notify()

    def retry(self, key: K) -> float:
        """Queue ``key`` again with exponential backoff; return the delay used."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay: float = min(_INITIAL_RETRY_SECONDS * 2.0**failures, _MAX_RETRY_SECONDS)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset the backoff of ``key`` after it succeeded."""
        with self._cond:
            self._failures.pop(key, None)

    def get(self, timeout: float | None = None) -> K | None:
        """Take the next key, waiting up to ``timeout``; ``None`` on timeout or shutdown.

        Without a timeout, ``None`` means shutdown and nothing else: a worker takes it as
        the signal to end.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                self._promote_due()
                if self._queue:
                    key = self._queue.pop(0)
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                now = self._clock()
                if deadline is not None and now >= deadline:
                    return None
                # A delayed key may have fallen due since it was promoted (the clock moved
                # on): then no wait, and the loop promotes it. Treating that as a timeout
                # once ended a worker for good in the middle of a run.
                wait = self._next_wait(deadline, now)
                if wait is None or wait > 0:
                    self._cond.wait(wait)

    def done(self, key: K) -> None:
        """Mark ``key`` processed; if it was added meanwhile, queue it again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._queue.append(key)
                    self._cond.notify()

    def shutdown(self) -> None:
        """Wake every waiting worker; later ``get`` calls return ``None``."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._due)

    def ready(self) -> int:
        """How many keys a worker could take now (delayed ones that are due included)."""
        now = self._clock()
        with self._cond:
            return len(self._queue) + sum(1 for due in self._due.values() if due <= now)

    def _promote_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key = heapq.heappop(self._delayed)
            if self._due.get(key) != due:
                continue  # superseded by an earlier time for the same key
            del self._due[key]
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)

    def _next_wait(self, deadline: float | None, now: float) -> float | None:
        candidates = [d - now for d in (deadline,) if d is not None]
        if self._delayed:
            candidates.append(self._delayed[0][0] - now)
        return min(candidates) if candidates else None
