"""Signals end long-running subcommands in an orderly way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from dra_driver.k8s.signals import stop_on_signals


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_set_the_stop_event(signum: signal.Signals) -> None:
    """SIGTERM (Pod deletion) and SIGINT (Ctrl-C) set the event instead of killing the process."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop = stop_on_signals()
        assert not stop.is_set()
        os.kill(os.getpid(), signum)
        assert stop.wait(2)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_sigusr1_writes_every_threads_stack_and_the_process_goes_on() -> None:
    """SIGUSR1 dumps each thread's stack to stderr (naming the threads' code) and stops nothing."""
    program = textwrap.dedent(
        """
        import os, threading, time
        from dra_driver.k8s.signals import STACKS_SIGNAL, stop_on_signals
        stop = stop_on_signals()
        def parked_worker():
            stop.wait(30)
        threading.Thread(target=parked_worker, daemon=True).start()
        time.sleep(0.1)
        os.kill(os.getpid(), STACKS_SIGNAL)
        time.sleep(0.2)
        print("still running", stop.is_set())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "still running False"
    assert done.stderr.count("most recent call first") == 2
    assert "parked_worker" in done.stderr
