"""One lifecycle for what the harness runs as a whole: started, waited for, stopped after.

The fake API server, the cluster and its actors, a real control plane and the simulation
stack each start several threads or processes in one call and stop them all in another. A
``with`` block stops them however it ends; a start that waits for readiness stops what it
started when it fails, so that nothing outlives the error that says what went wrong.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from types import TracebackType
from typing import Self


class Lifecycle(abc.ABC):
    """Something started and stopped as a whole; ``with it:`` stops it on the way out."""

    @abc.abstractmethod
    def start(self) -> None:
        """Start it; return once it serves."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop whatever of it runs; safe to repeat, and after a failed start."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _stop_on_failure(self, start: Callable[[], None]) -> None:
        """Run ``start``; if it fails (interrupted included), stop what it started and re-raise.

        Without this a component that never became ready would keep running after ``start``
        raised, since ``__exit__`` does not run when ``__enter__`` fails.
        """
        try:
            start()
        except BaseException:
            self.stop()
            raise
