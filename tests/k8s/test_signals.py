"""Signals end long-running subcommands in an orderly way."""

from __future__ import annotations

import os
import signal

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
