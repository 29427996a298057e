"""A stuck component can be asked where it is: the harness reads its threads' stacks."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from gpushare_simulator.harness.processes import ComponentProcess

_PARKED = textwrap.dedent(
    """
    import threading
    from dra_driver.k8s.signals import stop_on_signals
    stop = stop_on_signals()
    def release_loop_stuck_here():
        stop.wait(60)
    threading.Thread(target=release_loop_stuck_here, daemon=True).start()
    print('{"event": "parked"}', flush=True)
    stop.wait(60)
    """
)


def test_stacks_names_the_code_a_live_component_waits_in_and_leaves_it_running(
    work_dir: Path,
) -> None:
    """``stacks()`` returns the dump naming each thread's function; the process runs on."""
    process = ComponentProcess(
        [sys.executable, "-c", _PARKED], work_dir / "parked.log", ready_event="parked"
    )
    try:
        process.wait_ready(30)
        dump = process.stacks()
        assert "release_loop_stuck_here" in dump
        assert dump.count("most recent call first") == 2
        assert process.process.poll() is None
    finally:
        assert process.terminate() == 0


def test_stacks_of_an_exited_process_is_empty(work_dir: Path) -> None:
    """An exited process has no stacks to give: ``""``, not a wait or an error."""
    process = ComponentProcess(
        [sys.executable, "-c", "pass"], work_dir / "gone.log", ready_event="x"
    )
    process.process.wait(30)
    assert process.stacks() == ""
