"""The node-wide lock that serialises claim state changes across plugin processes.

During a rolling update two plugin Pods run on one node; both read and write the same
checkpoint and CDI directory, so every state change happens under this lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

DEFAULT_LOCK_TIMEOUT: Final = 30.0
"""Seconds to wait for the lock: a batch holds it for milliseconds, so this means a stuck
holder (another plugin Pod hung on a dead disk, say), not a busy one."""
_POLL_SECONDS: Final = 0.02


class LockTimeoutError(TimeoutError):
    """Another process held the node-wide lock for longer than the timeout."""


@contextlib.contextmanager
def file_lock(path: Path, *, timeout: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (shared by every plugin Pod on the node).

    Raises :class:`LockTimeoutError` after ``timeout`` seconds (:data:`DEFAULT_LOCK_TIMEOUT`
    unless given) instead of waiting for ever behind a holder that never lets go. The file is
    created 0600 and never opened through a symlink: the plugin runs as root, and creating or
    opening a file a planted link points at is how root gets tricked into writes.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        timeout = DEFAULT_LOCK_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeoutError(
                        f"node lock {path} held by another process for over {timeout:g} s "
                        "(is a second plugin Pod on this node stuck? see its logs)"
                    ) from None
                time.sleep(_POLL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
