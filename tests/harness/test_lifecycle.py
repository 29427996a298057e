"""The shared lifecycle: what a start or a ``with`` block started is stopped, whatever fails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gpushare_simulator.harness.lifecycle import Lifecycle
from gpushare_simulator.harness.spawn import LoggedProcess

_SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


class _Sleeper(Lifecycle):
    """One long-lived process; with ``ready=False`` it never becomes ready."""

    def __init__(self, log: Path, *, ready: bool) -> None:
        self.process = LoggedProcess("sleeper", _SLEEPER, log)
        self._ready = ready

    def start(self) -> None:
        self._stop_on_failure(self._start)

    def _start(self) -> None:
        self.process.start()
        if not self._ready:
            raise TimeoutError(f"{self.process.name} not ready")

    def stop(self) -> None:
        self.process.stop(5.0)


def test_a_process_that_never_becomes_ready_is_stopped_and_named(tmp_path: Path) -> None:
    """A start that fails after starting a process stops it, and the error names the process."""
    sleeper = _Sleeper(tmp_path / "log", ready=False)
    with pytest.raises(TimeoutError, match=r"^sleeper not ready$"):
        sleeper.start()
    assert sleeper.process.process is not None
    assert not sleeper.process.running()


def test_a_with_block_stops_what_it_started_when_it_raises(tmp_path: Path) -> None:
    """``with`` yields the started thing itself and stops it when the block raises."""
    sleeper = _Sleeper(tmp_path / "log", ready=True)
    with pytest.raises(RuntimeError, match="the block failed"):
        _fail_inside(sleeper)
    assert not sleeper.process.running()


def _fail_inside(sleeper: _Sleeper) -> None:
    with sleeper as started:
        assert started is sleeper
        assert sleeper.process.running()
        raise RuntimeError("the block failed")
