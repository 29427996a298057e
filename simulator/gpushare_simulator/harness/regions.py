"""Regions written as HAMi-core's ``libvgpu.so`` writes them, for tests and the simulator.

:class:`FakeTask` stands for the CUDA processes of one container: it creates the region file
(every field where the library's own struct puts it), registers processes with their memory
and SM use per card, and launches "kernels" the way the library's rate limiter does. Only a
rate-limited task (an SM limit between 1 and 99 that its policy and the region's
``utilization_switch`` enforce) waits while the monitor holds it (``recent_kernel == -1``) and
marks its launches; any other task runs at once and marks nothing, so only the SM utilisation
its processes report shows that it is busy.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from dra_driver.hamicore.layout import (
    EXITED_PID,
    FILE_TAIL,
    HEADER,
    INT32,
    INT64,
    MAGIC,
    UINT64,
    UUID_BYTES,
    V1_2,
)

_LAYOUT = V1_2
_ACTIVE = 2
"""What the library writes to ``recent_kernel`` at every rate-limited launch."""
_WHOLE_CARD = 100
"""An SM limit of 100 (or 0) is no limit: the library skips its rate limiter."""
_FORCE, _DISABLE = "force", "disable"
"""``GPU_CORE_UTILIZATION_POLICY`` values that override the region's switch (1 and 0)."""


@dataclasses.dataclass(frozen=True)
class FakeProcess:
    """One process of the container: its PIDs and its memory (bytes) and SM use per card."""

    pid: int
    hostpid: int
    memory: Sequence[int]
    sm_util: Sequence[int]


class FakeTask:
    """The region of one container's CUDA processes; every write goes to the file at once."""

    def __init__(
        self,
        path: Path,
        uuids: Sequence[str],
        *,
        limits: Sequence[int],
        sm_limits: Sequence[int],
        priority: int,
        policy: str = "default",
    ) -> None:
        self.path = path
        self.cards = len(uuids)
        self.sm_limits = tuple(sm_limits)
        self.policy = policy
        # The library sizes its file by writing one byte past the struct: it is that much longer.
        data = bytearray(_LAYOUT.size + FILE_TAIL)
        HEADER.pack_into(data, 0, MAGIC, *_LAYOUT.version, 1)
        UINT64.pack_into(data, _LAYOUT.device_num, len(uuids))
        for index, uuid in enumerate(uuids):
            encoded = uuid.encode()[: UUID_BYTES - 1]
            start = _LAYOUT.uuids + index * UUID_BYTES
            data[start : start + len(encoded)] = encoded
            UINT64.pack_into(data, _LAYOUT.limit + 8 * index, limits[index])
            UINT64.pack_into(data, _LAYOUT.sm_limit + 8 * index, sm_limits[index])
        INT32.pack_into(data, _LAYOUT.utilization_switch, 1)  # the library starts limited
        INT32.pack_into(data, _LAYOUT.priority, priority)
        path.write_bytes(bytes(data))

    def _write(self, offset: int, raw: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, raw, offset)
        finally:
            os.close(fd)

    def _read_int(self, offset: int) -> int:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            value: int = INT32.unpack(os.pread(fd, 4, offset))[0]
        finally:
            os.close(fd)
        return value

    def set_processes(self, processes: Sequence[FakeProcess]) -> None:
        """Register ``processes`` in slots 0.., as the library does when they start."""
        for index, process in enumerate(processes):
            base = _LAYOUT.slot(index)
            self._write(base + _LAYOUT.slot_pid, INT32.pack(process.pid))
            self._write(base + _LAYOUT.slot_hostpid, INT32.pack(process.hostpid))
            self._write(base + _LAYOUT.slot_status, INT32.pack(1))
            for card in range(self.cards):
                memory = base + _LAYOUT.slot_used + card * _LAYOUT.memory_size
                self._write(memory + _LAYOUT.memory_total, UINT64.pack(process.memory[card]))
                util = base + _LAYOUT.slot_device_util + card * _LAYOUT.util_size
                self._write(util + _LAYOUT.util_sm, UINT64.pack(process.sm_util[card]))
        self._write(_LAYOUT.proc_num, INT32.pack(len(processes)))

    def exit(self, index: int) -> None:
        """End the process in slot ``index`` as the library does.

        Its pid and status go to 0; its last memory and SM figures stay, and ``proc_num`` is
        unchanged (the slot is only compacted away when another process takes the lock).
        """
        base = _LAYOUT.slot(index)
        self._write(base + _LAYOUT.slot_pid, INT32.pack(EXITED_PID))
        self._write(base + _LAYOUT.slot_status, INT32.pack(0))

    def rate_limited(self, card: int = 0) -> bool:
        """Whether a launch on ``card`` goes through the library's rate limiter now."""
        if not 0 < self.sm_limits[card] < _WHOLE_CARD or self.policy == _DISABLE:
            return False
        return self.policy == _FORCE or self.utilization_switch != 0

    def launch(self, card: int = 0) -> bool:
        """Launch a kernel on ``card`` as the library would; return whether it ran now."""
        if not self.rate_limited(card):
            return True  # the library's fast path: neither held nor marked
        if self.suspended:
            return False
        self._write(_LAYOUT.recent_kernel, INT32.pack(_ACTIVE))
        self._write(_LAYOUT.last_kernel_time, INT64.pack(1))
        return True

    @property
    def suspended(self) -> bool:
        """Whether the monitor holds the task's launches."""
        return self._read_int(_LAYOUT.recent_kernel) == -1

    @property
    def utilization_switch(self) -> int:
        """1 while the task's SM limit is enforced, 0 while it may burst."""
        return self._read_int(_LAYOUT.utilization_switch)

    @property
    def recent_kernel(self) -> int:
        """The raw ``recent_kernel`` field."""
        return self._read_int(_LAYOUT.recent_kernel)
