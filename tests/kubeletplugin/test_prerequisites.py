"""/readyz fails, naming what is missing, until the node has what the backend needs."""

from __future__ import annotations

import os
from pathlib import Path

from structlog.testing import capture_logs

from dra_driver.api import Backend
from dra_driver.kubeletplugin.prerequisites import (
    RECHECK_SECONDS,
    Prerequisites,
    backend_problem,
    driver_problem,
)
from dra_driver.nvml.driverfiles import DriverFiles


def test_hami_core_needs_its_library(tmp_path: Path) -> None:
    """No libvgpu.so at the configured path: the problem names the path and the fix."""
    library = tmp_path / "libvgpu.so"
    assert backend_problem(Backend.HAMI_CORE, library, tmp_path) == (
        f"backend hami-core: {library} is not there; install HAMi-core's libvgpu.so on the "
        "node (or enable the chart's hamiCore.installer)"
    )
    library.write_bytes(b"\x7fELF")
    assert backend_problem(Backend.HAMI_CORE, library, tmp_path) is None
    library.unlink()
    library.mkdir()  # a directory where the library should be is not it
    assert backend_problem(Backend.HAMI_CORE, library, tmp_path) is not None


def test_mps_needs_the_control_daemons_pipe(tmp_path: Path) -> None:
    """The pipe directory must hold the daemon's control FIFO."""
    assert backend_problem(Backend.MPS, tmp_path / "x", tmp_path) == (
        f"backend mps: no control pipe in {tmp_path}; start the NVIDIA MPS control daemon "
        "for this node's cards with that pipe directory"
    )
    (tmp_path / "control").write_text("not a pipe")
    assert backend_problem(Backend.MPS, tmp_path / "x", tmp_path) is not None
    (tmp_path / "control").unlink()
    os.mkfifo(tmp_path / "control")
    assert backend_problem(Backend.MPS, tmp_path / "x", tmp_path) is None


def test_backend_none_needs_nothing(tmp_path: Path) -> None:
    """Accounting only: nothing to install."""
    assert backend_problem(Backend.NONE, tmp_path / "x", tmp_path / "y") is None


def test_missing_driver_files_are_named_with_the_driver_root(tmp_path: Path) -> None:
    """Without libcuda the plugin is not ready, and says where it looked."""
    assert driver_problem(DriverFiles(missing=("libcuda.so",)), Path("/")) == (
        "driver files not found under driver root /: libcuda.so; set kubeletPlugin.driverRoot "
        "to where the NVIDIA driver is installed"
    )
    assert driver_problem(DriverFiles(), Path("/")) is None


def test_the_verdict_is_renewed_every_minute_and_changes_are_logged() -> None:
    """Checked at start; again only after a minute; a new problem and its fix are each logged."""
    problems: list[list[str]] = [["library missing"], ["library missing"], []]
    calls: list[int] = []
    now = [0.0]

    def check() -> list[str]:
        calls.append(1)
        return problems[len(calls) - 1]

    prerequisites = Prerequisites(check, clock=lambda: now[0])
    assert prerequisites.not_ready() == "not checked yet"
    with capture_logs() as logs:
        prerequisites.refresh(force=True)
        assert prerequisites.not_ready() == "library missing"
        now[0] += RECHECK_SECONDS / 2
        prerequisites.refresh()
        assert len(calls) == 1
        now[0] += RECHECK_SECONDS
        prerequisites.refresh()
        now[0] += RECHECK_SECONDS
        prerequisites.refresh()
    assert prerequisites.not_ready() is None
    assert [e["event"] for e in logs] == ["plugin.prerequisite_missing", "plugin.prerequisites_met"]
