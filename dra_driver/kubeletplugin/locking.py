"""The node-wide lock that serialises claim state changes across plugin processes.

During a rolling update two plugin Pods run on one node; both read and write the same
checkpoint and CDI directory, so every state change happens under this lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (shared by every plugin Pod on the node).

    The file is created 0600 and never opened through a symlink: the plugin runs as root, and
    creating or opening a file a planted link points at is how root gets tricked into writes.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
