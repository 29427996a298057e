"""Run a command that the kernel kills (SIGKILL) when the process that started it goes away.

    python die_with_parent.py PARENT_PID COMMAND [ARG...]

Run by file path, never imported: this process must stay single-threaded and start nothing
of the driver, because between its ``prctl`` and its ``exec`` no other code may run. (Setting
the signal in ``subprocess``' ``preexec_fn`` instead can deadlock a parent with threads, and
the harness has dozens.) The death signal survives ``exec``. If the parent is already gone
when it is set, the command is not started at all.

Linux only. The signal follows the *thread* that started this process: start components from
a thread that lives as long as they do (the harness and the hack/ scripts use the main thread).
"""

import ctypes
import os
import signal
import sys
from typing import NoReturn

_PR_SET_PDEATHSIG = 1
_USAGE = 2
_PARENT_GONE = 3


def main(argv: list[str]) -> int:
    """Set the death signal, check the parent, exec the command; return only on failure."""
    if len(argv) < 3 or not argv[1].isdigit():  # noqa: PLR2004 - program, parent, command
        print(f"usage: {argv[0]} PARENT_PID COMMAND [ARG...]", file=sys.stderr)  # noqa: T201
        return _USAGE
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        print(f"prctl: {os.strerror(ctypes.get_errno())}", file=sys.stderr)  # noqa: T201
        return _USAGE
    if os.getppid() != int(argv[1]):
        return _PARENT_GONE  # it died before the signal was armed: nobody would reap us
    return _become(argv[2:])


def _become(command: list[str]) -> NoReturn:
    os.execvp(command[0], command)  # noqa: S606 - argv comes from the harness, never a shell


if __name__ == "__main__":
    sys.exit(main(sys.argv))
