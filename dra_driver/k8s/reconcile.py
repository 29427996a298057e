"""A reconcile loop: worker threads taking keys from a work queue until stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from dra_driver.k8s.errors import ApiError, ConflictError, NotFoundError
from dra_driver.k8s.workqueue import WorkQueue
from dra_driver.logging import bound, get_logger

K = TypeVar("K", bound=Hashable)

log = get_logger(__name__)


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
    """

    def __init__(self, name: str, reconcile: Callable[[K], None], workers: int = 1) -> None:
        self.name = name
        self.queue: WorkQueue[K] = WorkQueue()
        self._reconcile = reconcile
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]

    def start(self) -> None:
        """Start the workers."""
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop taking keys and wait for the workers to finish their current one."""
        self.queue.shutdown()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
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
                self.queue.done(key)
