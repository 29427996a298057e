"""What the node must have before a claim prepared here can work, checked at start and every minute.

A plugin that reports Ready on a node where HAMi-core's library is missing, or where the MPS
control daemon is not running, has every pod it prepares start without the limits it was
promised, or not start at all. So ``/readyz`` fails, naming what is missing, until it is there:

- the NVIDIA driver's ``libcuda.so`` and ``libnvidia-ml.so`` under the driver root;
- backend ``hami-core``: ``libvgpu.so`` at ``--hami-core-library``;
- backend ``mps``: the control daemon's ``control`` pipe in ``--mps-pipe-directory``.

Only the node's default backend is checked: a claim that picks another one and finds it
missing fails its prepare with the same words.
"""

from __future__ import annotations

import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from dra_driver.api import Backend
from dra_driver.logging import get_logger
from dra_driver.nvml.driverfiles import DriverFiles

log = get_logger(__name__)

RECHECK_SECONDS: Final = 60.0
MPS_CONTROL_PIPE: Final = "control"


def _kind(path: Path) -> int | None:
    try:
        return path.stat().st_mode
    except OSError:
        return None


def backend_problem(backend: Backend, hami_library: Path, mps_pipe_dir: Path) -> str | None:
    """Return what ``backend`` lacks on this node, or ``None``."""
    if backend is Backend.HAMI_CORE:
        mode = _kind(hami_library)
        if mode is None or not stat.S_ISREG(mode):
            return (
                f"backend hami-core: {hami_library} is not there; install HAMi-core's "
                "libvgpu.so on the node (or enable the chart's hamiCore.installer)"
            )
    elif backend is Backend.MPS:
        mode = _kind(mps_pipe_dir / MPS_CONTROL_PIPE)
        if mode is None or not stat.S_ISFIFO(mode):
            return (
                f"backend mps: no control pipe in {mps_pipe_dir}; start the NVIDIA MPS control "
                "daemon for this node's cards with that pipe directory"
            )
    return None


def driver_problem(files: DriverFiles, driver_root: Path) -> str | None:
    """Return which required driver files were not found, or ``None``."""
    if not files.missing:
        return None
    return (
        f"driver files not found under driver root {driver_root}: {', '.join(files.missing)}; "
        "set kubeletPlugin.driverRoot to where the NVIDIA driver is installed"
    )


class Prerequisites:
    """The last verdict, renewed every :data:`RECHECK_SECONDS` by :meth:`refresh`."""

    def __init__(
        self, check: Callable[[], list[str]], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._check, self._clock = check, clock
        self._lock = threading.Lock()
        self._problems: list[str] | None = None
        self._checked = 0.0

    def refresh(self, *, force: bool = False) -> None:
        """Check again if a minute has passed (or ``force``); log what changed."""
        now = self._clock()
        with self._lock:
            if not force and self._problems is not None and now - self._checked < RECHECK_SECONDS:
                return
            previous, self._checked = self._problems, now
        problems = self._check()
        with self._lock:
            self._problems = problems
        if problems and problems != previous:
            for problem in problems:
                log.error("plugin.prerequisite_missing", problem=problem)
        elif not problems and previous:
            log.info("plugin.prerequisites_met")

    def not_ready(self) -> str | None:
        """Return what is missing for ``/readyz``, or ``None``."""
        with self._lock:
            problems = self._problems
        if problems is None:
            return "not checked yet"
        return "; ".join(problems) or None
