"""Which processes have work on the node's cards now, as NVML lists them (host PIDs).

The node monitor reads each process's SM use from its slot in a HAMi-core region. A process
that exits clears its slot's ``pid``; one killed by SIGKILL or the OOM killer clears nothing,
and its last SM figure would hold offline work suspended for good. NVML lists the processes
that hold a context on each card, by their PID in the host's namespace, which is what the
slot's ``hostpid`` holds: a slot whose process NVML does not list is dead. This needs no
``hostPID`` for the plugin's pod.
"""

from __future__ import annotations

from typing import Any, Final

import pynvml

from dra_driver.logging import get_logger

log = get_logger(__name__)

_LISTS: Final = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses")


def running_pids() -> frozenset[int] | None:
    """Return the host PIDs with a context on any card, or ``None`` when NVML cannot say.

    ``None`` (a call failed, a card or driver without the lists) makes the monitor count every
    slot with a PID, as it did before: never a live process taken for dead.
    """
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        pids: set[int] = set()
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for name in _LISTS:
                listed: list[Any] = getattr(pynvml, name)(handle)
                pids.update(int(process.pid) for process in listed)
    except (pynvml.NVMLError, AttributeError) as error:
        log.debug("nvml.running_processes_unknown", error=str(error))
        return None
    return frozenset(pids)
