"""Start processes that never outlive the process that started them.

Each is started through :mod:`gpushare_simulator.harness.die_with_parent`, so the kernel kills it
when its parent dies, however it dies (a test timeout's SIGKILL included); those still running
when the parent exits normally are killed at exit. An orphaned controller or plugin would keep
retrying its API server's port, and join whatever later test's server binds that port.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Final

_KILL_WAIT_SECONDS: Final = 20.0
_LAUNCHER: Final = Path(__file__).with_name("die_with_parent.py")
_LIVE: weakref.WeakSet[subprocess.Popen[bytes]] = weakref.WeakSet()
_LIVE_LOCK: Final = threading.Lock()


def spawn(
    argv: Sequence[str],
    *,
    stdout: IO[bytes] | int | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` so that it dies with this process; stdin is closed, stderr joins stdout.

    Call it from a thread that lives as long as the process it starts (see the launcher).
    """
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", str(_LAUNCHER), str(os.getpid()), *argv],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        env=None if env is None else dict(env),
        cwd=cwd,
    )
    with _LIVE_LOCK:
        _LIVE.add(process)
    return process


@atexit.register
def _kill_survivors() -> None:
    """At a normal exit, SIGKILL whatever this process started and did not stop."""
    with _LIVE_LOCK:
        survivors = [p for p in _LIVE if p.poll() is None]
    for process in survivors:
        process.kill()
        process.wait(_KILL_WAIT_SECONDS)


class LoggedProcess:
    """A program started by :func:`spawn` whose output goes to a log file; it may restart."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        """Start it (again, after a stop or kill), appending to its log."""
        self._log = self.log_path.open("ab")
        try:
            self.process = spawn(self.command, stdout=self._log, env=self.env)
        except OSError:
            self._close()
            raise

    def running(self) -> bool:
        """Whether it is alive."""
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float, *, kill: bool = False) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``; SIGKILL at once with ``kill``. Repeatable."""
        process = self.process
        if process is not None and process.poll() is None:
            if kill:
                process.kill()
            else:
                process.terminate()
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._close()

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 25) -> str:
        """Return the last ``lines`` lines of its log, under a header naming it."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError as error:
            text = [f"(cannot read: {error})"]
        return f"--- {self.name} ({self.log_path}, last {lines} lines) ---\n" + "\n".join(text)
