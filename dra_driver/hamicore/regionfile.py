"""Region files on the host: opened without trusting them, read and written a few bytes at a time.

A region file lives in a directory every process of the container can write, so whatever is
there may be hostile: a symlink to a host file, a FIFO, a file of the wrong size, a file
truncated or replaced while we hold it. So a file is opened with ``O_NOFOLLOW`` and
``O_NONBLOCK`` (a FIFO cannot block the opener), must be a regular file with one link and
the size of a known format (the struct's, or the one byte more of a file the library made),
and is read and written with ``pread``/``pwrite`` at fixed offsets. Not ``mmap``: a container
that truncates its file under a mapping would kill the plugin with SIGBUS at the next read.
The header is checked again on every read, and nothing is written unless the read just before
found a known format.

Opening happens in two steps: an ``O_PATH`` descriptor (which opens nothing: no device is
touched, no FIFO waited on) is checked to be a regular file with one link, and only then
reopened for reading and writing through ``/proc/self/fd``, which reaches that same inode
whatever has been renamed into its place meanwhile.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import Final

from dra_driver.hamicore.layout import (
    EXITED_PID,
    HEADER,
    INT32,
    UINT64,
    UUID_BYTES,
    RegionLayout,
)
from dra_driver.hamicore.region import RegionError, check_counts, check_header, read_uuid

_PATH_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclasses.dataclass(frozen=True)
class CardRead:
    """One card of a region: its UUID, the library's limits, and the processes' use of it."""

    uuid: str
    memory_limit: int
    sm_limit: int
    memory_used: int
    """Sum of the live processes' ``used[card].total`` (bytes)."""
    sm_util: int
    """Sum of the live processes' last recorded SM utilisation (percent)."""


@dataclasses.dataclass(frozen=True)
class RegionRead:
    """What the monitor reads from a region each period."""

    cards: tuple[CardRead, ...]
    processes: int
    recent_kernel: int
    utilization_switch: int
    priority: int


class RegionFile:
    """An open region file; :meth:`read` and :meth:`write` raise :class:`RegionError`."""

    def __init__(self, path: Path, fd: int, identity: tuple[int, int]) -> None:
        self.path = path
        self._fd = fd
        self.identity = identity
        """(device, inode): a file replaced under the same name is another region."""
        self._layout: RegionLayout | None = None
        self._last: tuple[int, int] | None = None

    @classmethod
    def open(cls, path: Path) -> RegionFile:
        """Open ``path`` if it can be a region; raise :class:`RegionError` or ``OSError``."""
        handle = os.open(path, _PATH_FLAGS)
        try:
            info = os.fstat(handle)
            if not stat.S_ISREG(info.st_mode):
                problem = "not a regular file"
            elif info.st_nlink != 1:
                problem = f"{info.st_nlink} hard links; a region has one"
            else:
                fd = os.open(f"/proc/self/fd/{handle}", os.O_RDWR | os.O_CLOEXEC)
                return cls(path, fd, (info.st_dev, info.st_ino))
        finally:
            os.close(handle)
        raise RegionError("malformed", problem)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _check_size(self) -> int:
        return os.fstat(self._fd).st_size

    def _pread(self, size: int, offset: int) -> memoryview:
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise RegionError("size", "the file was truncated")
        return memoryview(data)

    def read(self, running: Collection[int] | None = None) -> RegionRead:
        """Read the monitor's fields and each card's use; refuse an unknown or broken region.

        ``running``: the host PIDs with work on the node's cards now (NVML's list), or ``None``
        where that is unknown; a slot whose process is not among them is not counted.
        """
        self._layout = self._last = None
        layout = check_header(os.pread(self._fd, HEADER.size, 0), self._check_size())
        front = self._pread(layout.procs, 0)  # header, cards, limits
        tail = self._pread(16, layout.proc_num)  # proc_num, switch, recent_kernel, priority
        device_num: int = UINT64.unpack_from(front, layout.device_num)[0]
        proc_num, switch, kernel, priority = (INT32.unpack_from(tail, 4 * i)[0] for i in range(4))
        check_counts(device_num, proc_num)
        used, util = self._usage(layout, proc_num, device_num, running)
        cards = tuple(
            CardRead(
                uuid=read_uuid(front, layout.uuids + i * UUID_BYTES),
                memory_limit=UINT64.unpack_from(front, layout.limit + 8 * i)[0],
                sm_limit=UINT64.unpack_from(front, layout.sm_limit + 8 * i)[0],
                memory_used=used[i],
                sm_util=util[i],
            )
            for i in range(device_num)
        )
        self._layout, self._last = layout, (kernel, switch)
        return RegionRead(cards, proc_num, kernel, switch, priority)

    def _usage(
        self,
        layout: RegionLayout,
        proc_num: int,
        device_num: int,
        running: Collection[int] | None,
    ) -> tuple[list[int], list[int]]:
        """Sum each card's memory (``used.total``) and SM use over the live processes' slots.

        A process that exits normally only zeroes its slot's ``pid`` (and ``status``): the
        slot stays counted in ``proc_num`` with its last memory and SM figures until another
        process of the region takes the library's lock and compacts the slots, which may be
        never. Such a slot is skipped, or a finished task would look busy for good. A process
        killed (SIGKILL, the OOM killer) zeroes nothing: its slot is skipped when its
        ``hostpid`` is not among the ``running`` processes NVML reports on the cards.
        """
        used, util = [0] * device_num, [0] * device_num
        if not (proc_num and device_num):
            return used, util
        slots = self._pread(proc_num * layout.slot_size, layout.procs)
        for index in range(proc_num):
            base = index * layout.slot_size
            if INT32.unpack_from(slots, base + layout.slot_pid)[0] == EXITED_PID:
                continue
            hostpid = INT32.unpack_from(slots, base + layout.slot_hostpid)[0]
            if running is not None and hostpid > 0 and hostpid not in running:
                continue  # killed: its slot was never cleared
            for card in range(device_num):
                memory = base + layout.slot_used + card * layout.memory_size
                used[card] += UINT64.unpack_from(slots, memory + layout.memory_total)[0]
                sm = base + layout.slot_device_util + card * layout.util_size
                util[card] += UINT64.unpack_from(slots, sm + layout.util_sm)[0]
        return used, util

    def write(self, recent_kernel: int, utilization_switch: int) -> None:
        """Set the two fields the monitor owns, where they changed since the last :meth:`read`.

        Only right after a read that found a known format: a region never read, or found
        foreign, is never written.
        """
        layout, last = self._layout, self._last
        if layout is None or last is None:
            raise RegionError("malformed", "not read, or not a known region: never written")
        if recent_kernel != last[0]:
            os.pwrite(self._fd, INT32.pack(recent_kernel), layout.recent_kernel)
        if utilization_switch != last[1]:
            os.pwrite(self._fd, INT32.pack(utilization_switch), layout.utilization_switch)
        self._last = (recent_kernel, utilization_switch)
