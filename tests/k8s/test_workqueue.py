"""The work queue: each key once, never processed twice at a time, retried with backoff."""

from __future__ import annotations

import threading
import time

from dra_driver.k8s.workqueue import WorkQueue


def test_a_key_added_twice_is_queued_once() -> None:
    """Duplicate adds of a waiting key collapse into one pass."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert [queue.get(0), queue.get(0), queue.get(0)] == ["a", "b", None]


def test_a_key_added_while_processing_is_requeued_after_done() -> None:
    """An add during processing is not lost and not handed to a second worker meanwhile."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(0) == "a"
    queue.add("a")
    assert queue.get(0) is None
    queue.done("a")
    assert queue.get(0) == "a"


def test_add_after_waits_for_the_delay() -> None:
    """A delayed key is not handed out before its time and is handed out after it."""
    now = [100.0]
    queue: WorkQueue[str] = WorkQueue(clock=lambda: now[0])
    queue.add_after("a", 5)
    assert queue.get(0) is None
    now[0] = 105.0
    assert queue.get(0) == "a"


def test_retry_backs_off_exponentially_until_forgotten() -> None:
    """Each retry of a failing key doubles its delay; forget resets it."""
    queue: WorkQueue[str] = WorkQueue(clock=lambda: 0.0)
    delays = [queue.retry("a") for _ in range(3)]
    assert delays == [0.05, 0.1, 0.2]
    queue.forget("a")
    assert queue.retry("a") == 0.05


def test_shutdown_wakes_a_blocked_worker() -> None:
    """A worker blocked in get returns None promptly when the queue shuts down."""
    queue: WorkQueue[str] = WorkQueue()
    results: list[str | None] = []
    worker = threading.Thread(target=lambda: results.append(queue.get()))
    worker.start()
    time.sleep(0.05)
    queue.shutdown()
    worker.join(2)
    assert not worker.is_alive()
    assert results == [None]


def test_concurrent_workers_never_share_a_key() -> None:
    """With four workers and many adds, no key is ever processed by two workers at once."""
    queue: WorkQueue[int] = WorkQueue()
    active: set[int] = set()
    overlaps: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        while (key := queue.get(0.5)) is not None:
            with lock:
                if key in active:
                    overlaps.append(key)
                active.add(key)
            time.sleep(0.001)
            with lock:
                active.discard(key)
            queue.done(key)

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for i in range(400):
        queue.add(i % 5)
    for worker in workers:
        worker.join(5)
    assert overlaps == []


def test_a_key_waits_on_one_timer_however_often_it_is_requeued() -> None:
    """Retrying a key many times leaves one delayed entry, due at the earliest requested time."""
    now = [0.0]
    queue: WorkQueue[str] = WorkQueue(clock=lambda: now[0])
    for delay in (5.0, 3.0, 7.0, 5.0):
        queue.add_after("pod", delay)
    assert len(queue) == 1
    now[0] = 2.9
    assert queue.get(timeout=0) is None
    now[0] = 3.0
    assert queue.get(timeout=0) == "pod"
    queue.done("pod")
    now[0] = 10.0
    assert queue.get(timeout=0) is None


def test_get_without_timeout_takes_a_key_that_falls_due_while_it_looks() -> None:
    """A delayed key due between two clock reads is handed out, not mistaken for a timeout.

    The clock moves on between promoting due keys and computing the wait: once, ``get``
    returned ``None`` there, and the worker that called it ended as if at shutdown.
    """
    readings = iter([0.0, 0.5, 1.5])
    queue: WorkQueue[str] = WorkQueue(clock=lambda: next(readings, 2.0))
    queue.add_after("claim", 1.0)  # due at 1.0
    assert queue.get() == "claim"
