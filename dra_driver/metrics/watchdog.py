"""Watchdogs: each long-running loop proves it is moving, and ``/livez`` fails when one is stuck.

Timeouts bound every wait we know of; a watchdog catches the waits we do not (a call without
a bound, a deadlock, a wedged driver call). A loop *stalls* when it has work and has made no
progress for longer than its limit; then its liveness check names the loop, what it was doing
and for how long, and the kubelet restarts the container. A loop that keeps failing and
retrying is moving: an API server that is down must not make every component restart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_PREFIX: Final = "gpushare"


class Watched(Protocol):
    """A loop a watchdog looks after."""

    @property
    def name(self) -> str:
        """The loop's name, as the liveness check and the metric show it."""

    def stalled(self) -> str | None:
        """Return why the loop counts as stuck now, or ``None`` while it moves (or rests)."""

    def silent_seconds(self) -> float:
        """Seconds since the loop last showed progress."""


class Heartbeat:
    """When a loop last made progress, and what it is busy with; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._doing: str | None = None

    def beat(self, doing: str | None = None) -> None:
        """Record progress, and what the loop does next (``None``: nothing, it rests)."""
        now = self._clock()
        with self._lock:
            self._last, self._doing = now, doing

    def read(self) -> tuple[float, str | None]:
        """Return seconds since the last beat and what the loop was doing then."""
        now = self._clock()
        with self._lock:
            return max(0.0, now - self._last), self._doing


def stall_reason(silent: float, limit: float, doing: str) -> str | None:
    """Return the liveness message for a loop ``silent`` s into ``doing``; ``None`` if in time."""
    if silent <= limit:
        return None
    return f"{doing} for {silent:.0f} s without progress (limit {limit:.0f} s)"


def liveness_checks(loops: Iterable[Watched]) -> dict[str, Callable[[], str | None]]:
    """Return one ``/livez`` check per loop, named after it."""
    return {loop.name: loop.stalled for loop in loops}


class SilenceCollector(Collector):
    """Exports each loop's seconds since progress, so an alert can fire before the restart."""

    def __init__(self, loops: Callable[[], list[Watched]]) -> None:
        self._loops = loops

    def collect(self) -> list[GaugeMetricFamily]:
        """Yield the one gauge family."""
        family = GaugeMetricFamily(
            f"{_PREFIX}_loop_seconds_since_progress",
            "Seconds since a long-running loop last showed progress",
            labels=["loop"],
        )
        for loop in self._loops():
            family.add_metric([loop.name], loop.silent_seconds())
        return [family]


def register_silence(registry: CollectorRegistry, loops: Callable[[], list[Watched]]) -> None:
    """Export the loops' silence on ``registry``."""
    registry.register(SilenceCollector(loops))
