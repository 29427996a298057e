"""How every long-running subcommand learns that the kubelet or Kubernetes wants it gone.

Also how an operator asks a live process where it is: SIGUSR1 writes every thread's stack to
stderr (so to the container's log), as SIGQUIT does for a Go component, without stopping it.
"""

from __future__ import annotations

import faulthandler
import signal
import threading

STACKS_SIGNAL = signal.SIGUSR1
"""The signal that makes a component log every thread's stack and carry on."""
_STDERR = 2


def stop_on_signals() -> threading.Event:
    """Return an event set by SIGTERM (Pod deletion) or SIGINT (Ctrl-C).

    Installed first thing, so a signal during start-up still ends in an orderly stop. SIGUSR1
    dumps every thread's stack (see :data:`STACKS_SIGNAL`).
    Must be called from the main thread, as Python only delivers signals there.
    """
    stop = threading.Event()
    # To the process's own stderr (descriptor 2), whatever sys.stderr was swapped for.
    faulthandler.register(STACKS_SIGNAL, file=_STDERR, all_threads=True, chain=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
