"""``gpushare-dra region``: what a region file says, for an operator (HAMi's ``shrreg_tool``).

Reading is as careful as the monitor's: the file must be a regular file (a symlink, FIFO or
device is refused without being opened for reading), no larger than a region, and in a format
this driver knows; nothing is ever written.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from dra_driver.hamicore.feedback import ENFORCED, SUSPENDED
from dra_driver.hamicore.layout import FILE_TAIL, REGION_SIZE
from dra_driver.hamicore.region import Region, RegionError, decode_region, region_to_json
from dra_driver.nvml.fields import format_quantity
from dra_driver.settings import as_document

_MIB: Final = 1 << 20


def read_region_file(path: Path) -> Region:
    """Decode the region at ``path``; raise :class:`RegionError` or ``OSError`` naming why."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RegionError("malformed", f"{path} is not a regular file")
        # One byte past the largest size a region file has: a longer file is refused as such.
        data = os.read(fd, REGION_SIZE + FILE_TAIL + 1)
    finally:
        os.close(fd)
    return decode_region(data)


def _state(region: Region) -> str:
    if region.recent_kernel == SUSPENDED:
        return "suspended: its kernel launches are held while more important work is busy"
    launched = "launched kernels lately" if region.recent_kernel > 0 else "idle lately"
    limited = (
        "SM limit enforced" if region.utilization_switch == ENFORCED else "may use the idle card"
    )
    return f"running, {launched}; {limited}"


def _bytes(value: int) -> str:
    return format_quantity(value) if value and value % _MIB == 0 else f"{value} B"


def render(region: Region, output: str) -> str:
    """Return the region as text (``table``) or as a JSON or YAML document."""
    if output != "table":
        return as_document(region_to_json(region), output)
    lines = [
        f"region version {region.major_version}.{region.minor_version}, "
        f"{region.device_num} card(s), {region.proc_num} process(es)",
        f"priority:    {region.priority} ({'online' if region.priority == 0 else 'offline'})",
        f"state:       {_state(region)}",
        f"             (recent_kernel {region.recent_kernel}, "
        f"utilization_switch {region.utilization_switch})",
        "",
        "CARD  UUID                                      MEMORY LIMIT  SM LIMIT",
    ]
    for index, uuid in enumerate(region.uuids):
        memory = _bytes(region.limit[index]) if region.limit[index] else "none"
        cores = f"{region.sm_limit[index]}%" if region.sm_limit[index] else "none"
        lines.append(f"{index:<5} {uuid:<41} {memory:<13} {cores}")
    lines += ["", "SLOT  PID   HOST PID  CARD  MEMORY USED  SM UTIL"]
    for slot in region.procs:
        for index, use in enumerate(slot.devices):
            lines.append(
                f"{slot.slot:<5} {slot.pid:<5} {slot.hostpid:<9} {index:<5} "
                f"{_bytes(use.total):<12} {use.sm_util}%"
            )
    return "\n".join(lines)
