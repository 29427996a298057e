"""Where each field of HAMi-core's shared region lives (region format 1.2, x86-64 and arm64).

The numbers are those of ``shared_region_t`` as the library's own C header compiles: a 4-byte
magic and two version words first, then per-card UUIDs and limits for 16 cards, 1,024
process slots, and the monitor's fields at the end. The layout changes between formats, so
nothing past the header is read before the magic and version are known.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

MAGIC: Final = 19920718
"""``initialized_flag`` once the library finished initialising the region."""
MAX_CARDS: Final = 16
"""``CUDA_DEVICE_MAX_COUNT``."""
MAX_PROCESSES: Final = 1024
"""``SHARED_REGION_MAX_PROCESS_NUM``."""
UUID_BYTES: Final = 96

# Header: initialized_flag, major_version, minor_version, sm_init_flag (int32 each).
HEADER: Final = struct.Struct("<iiii")
UINT64: Final = struct.Struct("<Q")
INT32: Final = struct.Struct("<i")
INT64: Final = struct.Struct("<q")


@dataclass(frozen=True)
class RegionLayout:
    """Offsets of one region format; every integer is little-endian."""

    version: tuple[int, int]
    size: int
    owner_pid: int
    device_num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int
    slot_size: int
    slot_pid: int
    slot_hostpid: int
    slot_used: int
    slot_monitorused: int
    slot_device_util: int
    slot_status: int
    memory_size: int
    """``device_memory_t``: context, module, data, offset, total (uint64 each), padded."""
    memory_total: int
    """Offset of ``total`` in ``device_memory_t``."""
    util_size: int
    """``device_util_t``: dec, enc, sm utilisation (uint64 each), padded."""
    util_sm: int
    """Offset of ``sm_util`` in ``device_util_t``."""

    def slot(self, index: int) -> int:
        """Offset of process slot ``index``."""
        return self.procs + index * self.slot_size


V1_2: Final = RegionLayout(
    version=(1, 2),
    size=2008952,
    owner_pid=16,
    device_num=56,
    uuids=64,
    limit=1600,
    sm_limit=1728,
    procs=1856,
    proc_num=2008896,
    utilization_switch=2008900,
    recent_kernel=2008904,
    priority=2008908,
    last_kernel_time=2008912,
    slot_size=1960,
    slot_pid=0,
    slot_hostpid=4,
    slot_used=8,
    slot_monitorused=1032,
    slot_device_util=1160,
    slot_status=1928,
    memory_size=64,
    memory_total=32,
    util_size=48,
    util_sm=16,
)

EXITED_PID: Final = 0
"""A process slot's ``pid`` once its process exited: the slot keeps its last figures."""
FILE_TAIL: Final = 1
"""Bytes a region file has past the struct: the library sizes a new file by writing one byte
at offset ``sizeof(shared_region_t)``, so its files are the struct's size plus this."""

KNOWN_VERSIONS: Final = {V1_2.version: V1_2}
"""Region formats this driver reads and writes; any other is left alone."""
REGION_SIZE: Final = V1_2.size
