"""The node-wide lock that serialises claim state changes across plugin processes.

During a rolling update two plugin Pods run on one node; both read and write the same
checkpoint and CDI directory, so every state change happens under this lock.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (shared by every plugin Pod on the node)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
