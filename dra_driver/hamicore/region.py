"""Decoding a HAMi-core shared region into values, refusing anything it does not recognise.

:func:`check_header` looks at the first 16 bytes and the size only: a region whose magic,
version or size is not one this driver knows is never read further (nor written, by the
monitor). :func:`decode_region` then reads the whole region; only the ``proc_num`` slots in use
and the ``device_num`` cards of each are decoded.
"""

from __future__ import annotations

import dataclasses
import mmap
from typing import Any, Final, Literal, TypeAlias

from dra_driver.hamicore.layout import (
    FILE_TAIL,
    HEADER,
    INT32,
    INT64,
    KNOWN_VERSIONS,
    MAGIC,
    MAX_CARDS,
    MAX_PROCESSES,
    UINT64,
    UUID_BYTES,
    RegionLayout,
)

ErrorKind = Literal["size", "uninitialised", "magic", "version", "malformed"]
Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

_MEMORY_FIELDS: Final = ("context_size", "module_size", "data_size", "offset", "total")
_UTIL_FIELDS: Final = ("dec_util", "enc_util", "sm_util")


class RegionError(ValueError):
    """Not a region this driver can trust; ``kind`` says why (``uninitialised`` is transient)."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


@dataclasses.dataclass(frozen=True)
class CardUsage:
    """One process's use of one card: memory by kind (bytes) and utilisation (percent)."""

    context_size: int
    module_size: int
    data_size: int
    offset: int
    total: int
    monitorused: int
    sm_util: int
    enc_util: int
    dec_util: int


@dataclasses.dataclass(frozen=True)
class ProcessSlot:
    """A process registered in the region: its PID in the container and on the host."""

    slot: int
    pid: int
    hostpid: int
    status: int
    devices: tuple[CardUsage, ...]


@dataclasses.dataclass(frozen=True)
class Region:
    """A decoded region: the header, the cards and their limits, the processes, the switches."""

    initialized_flag: int
    major_version: int
    minor_version: int
    sm_init_flag: int
    owner_pid: int
    device_num: int
    uuids: tuple[str, ...]
    limit: tuple[int, ...]
    """Memory limit per card in bytes (0: none)."""
    sm_limit: tuple[int, ...]
    """SM limit per card in percent (0: none)."""
    proc_num: int
    procs: tuple[ProcessSlot, ...]
    utilization_switch: int
    """1: the SM limit is enforced; 0: a task under policy ``default`` may use the idle card."""
    recent_kernel: int
    """> 0: kernels launched lately; -1: launches blocked (the task is suspended)."""
    priority: int
    """``CUDA_TASK_PRIORITY``: 0 is the highest."""
    last_kernel_time: int


def check_header(header: Buffer, size: int) -> RegionLayout:
    """Return the layout of a region that starts with ``header`` and has ``size`` bytes.

    Raise :class:`RegionError` unless the magic and version are a format this driver knows and
    the size is one the library makes: the struct's, or one byte more. ``libvgpu.so`` sizes a
    new file by writing a single byte just past the end of the struct, so every file it makes
    is one byte longer than what it maps; a file of exactly the struct's size (as a test or
    another tool may write) reads the same. A shorter file was truncated; a longer one is not
    the library's.
    """
    data = memoryview(header).cast("B")
    if len(data) < HEADER.size:
        raise RegionError("size", f"{size} bytes: too short for a region header")
    flag, major, minor, _ = HEADER.unpack_from(data, 0)
    if flag == 0 and major == 0 and minor == 0:
        raise RegionError("uninitialised", "the region is not initialised yet")
    if flag != MAGIC:
        raise RegionError("magic", f"initialized_flag {flag} is not HAMi-core's {MAGIC}")
    layout = KNOWN_VERSIONS.get((major, minor))
    if layout is None:
        known = ", ".join(f"{a}.{b}" for a, b in sorted(KNOWN_VERSIONS))
        raise RegionError("version", f"region version {major}.{minor} is not one of {known}")
    if size not in (layout.size, layout.size + FILE_TAIL):
        raise RegionError(
            "size",
            f"{size} bytes where a {major}.{minor} region has {layout.size} "
            f"(or {layout.size + FILE_TAIL}, as libvgpu.so makes its file)",
        )
    return layout


def check_counts(device_num: int, proc_num: int) -> None:
    """Refuse card and process counts past the arrays they index."""
    if not 0 <= device_num <= MAX_CARDS:
        raise RegionError("malformed", f"device_num {device_num} is not in 0..{MAX_CARDS}")
    if not 0 <= proc_num <= MAX_PROCESSES:
        raise RegionError("malformed", f"proc_num {proc_num} is not in 0..{MAX_PROCESSES}")


def read_uuid(data: memoryview, offset: int) -> str:
    """Return the NUL-terminated card UUID at ``offset`` (undecodable bytes replaced)."""
    raw = bytes(data[offset : offset + UUID_BYTES]).split(b"\0", 1)[0]
    return raw.decode("ascii", "replace")


def _u64(data: memoryview, offset: int) -> int:
    value: int = UINT64.unpack_from(data, offset)[0]
    return value


def _i32(data: memoryview, offset: int) -> int:
    value: int = INT32.unpack_from(data, offset)[0]
    return value


def _slot(data: memoryview, layout: RegionLayout, index: int, device_num: int) -> ProcessSlot:
    base = layout.slot(index)
    devices = []
    for card in range(device_num):
        memory = base + layout.slot_used + card * layout.memory_size
        util = base + layout.slot_device_util + card * layout.util_size
        values = {name: _u64(data, memory + 8 * i) for i, name in enumerate(_MEMORY_FIELDS)}
        values |= {name: _u64(data, util + 8 * i) for i, name in enumerate(_UTIL_FIELDS)}
        values["monitorused"] = _u64(data, base + layout.slot_monitorused + 8 * card)
        devices.append(CardUsage(**values))
    return ProcessSlot(
        slot=index,
        pid=_i32(data, base + layout.slot_pid),
        hostpid=_i32(data, base + layout.slot_hostpid),
        status=_i32(data, base + layout.slot_status),
        devices=tuple(devices),
    )


def decode_region(buffer: Buffer) -> Region:
    """Decode a whole region; raise :class:`RegionError` for one this driver does not know."""
    data = memoryview(buffer).cast("B")
    layout = check_header(data[: HEADER.size], len(data))
    flag, major, minor, sm_init = HEADER.unpack_from(data, 0)
    device_num, proc_num = _u64(data, layout.device_num), _i32(data, layout.proc_num)
    check_counts(device_num, proc_num)
    return Region(
        initialized_flag=flag,
        major_version=major,
        minor_version=minor,
        sm_init_flag=sm_init,
        owner_pid=_u64(data, layout.owner_pid),
        device_num=device_num,
        uuids=tuple(read_uuid(data, layout.uuids + i * UUID_BYTES) for i in range(device_num)),
        limit=tuple(_u64(data, layout.limit + 8 * i) for i in range(device_num)),
        sm_limit=tuple(_u64(data, layout.sm_limit + 8 * i) for i in range(device_num)),
        proc_num=proc_num,
        procs=tuple(_slot(data, layout, i, device_num) for i in range(proc_num)),
        utilization_switch=_i32(data, layout.utilization_switch),
        recent_kernel=_i32(data, layout.recent_kernel),
        priority=_i32(data, layout.priority),
        last_kernel_time=INT64.unpack_from(data, layout.last_kernel_time)[0],
    )


def region_to_json(region: Region) -> dict[str, Any]:
    """Return the region as a JSON document (what ``gpushare-dra region -o json`` prints)."""
    doc: dict[str, Any] = dataclasses.asdict(region)
    for slot in doc["procs"]:
        slot["devices"] = list(slot["devices"])
    for key in ("uuids", "limit", "sm_limit", "procs"):
        doc[key] = list(doc[key])
    return doc
