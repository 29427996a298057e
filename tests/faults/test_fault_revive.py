"""The fault run restarts components that exit on their own, as the kubelet does."""

from __future__ import annotations

import sys
from pathlib import Path

from gpushare_simulator.harness.faultrun import FaultRun, FaultRunSettings
from gpushare_simulator.harness.processes import ComponentProcess


def _exited(work_dir: Path, name: str, output: str) -> ComponentProcess:
    """Start a real process that prints ``output`` (a component's log) and exits 1."""
    argv = [sys.executable, "-c", f"import sys; print({output!r}); sys.exit(1)"]
    process = ComponentProcess(argv, work_dir / f"{name}.log", ready_event="never")
    process.process.wait(10)
    return process


def test_a_controller_that_lost_its_lease_is_restarted_and_counted(work_dir: Path) -> None:
    """A leader that exits after losing its Lease comes back, and that is no violation."""
    run = FaultRun(FaultRunSettings(leader_elect=True, controllers=2), work_dir)
    gone = _exited(work_dir, "controller-0", '{"event": "controller.leadership_lost"}')
    run.components["controller-0"] = gone
    run._revive()
    revived = run.components["controller-0"]
    assert revived is not gone
    assert revived.argv == gone.argv
    assert run.report.exits == {"controller": 1}
    assert run.report.violations == []
    revived.kill()


def test_a_component_that_crashes_is_restarted_and_reported(work_dir: Path) -> None:
    """Any other exit is a bug: the run restarts the component and records a violation."""
    run = FaultRun(FaultRunSettings(), work_dir)
    gone = _exited(work_dir, "plugin-fault-1", "Traceback: boom")
    run.components["plugin-fault-1"] = gone
    run._revive()
    assert run.components["plugin-fault-1"] is not gone
    assert run.report.exits == {"plugin": 1}
    assert len(run.report.violations) == 1
    assert "plugin-fault-1 exited with 1" in run.report.violations[0]
    assert "Traceback: boom" in run.report.violations[0]
    run.components["plugin-fault-1"].kill()
