"""How every long-running subcommand learns that the kubelet or Kubernetes wants it gone."""

from __future__ import annotations

import signal
import threading


def stop_on_signals() -> threading.Event:
    """Return an event set by SIGTERM (Pod deletion) or SIGINT (Ctrl-C).

    Installed first thing, so a signal during start-up still ends in an orderly stop.
    Must be called from the main thread, as Python only delivers signals there.
    """
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
