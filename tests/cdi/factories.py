"""Cards, shares, configs and host paths for the CDI tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.api import Backend, EffectiveConfig, Isolation, Priority
from dra_driver.cdi import CardShare, HostPaths
from dra_driver.nvml.inventory import Card

MIB = 2**20
GIB = 2**30
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
SHARE_1 = "11111111-2222-4333-8444-555555555555"
SHARE_2 = "66666666-7777-4888-9999-aaaaaaaaaaaa"
STATE = Path("/var/lib/kubelet/plugins/gpushare/hami")

HOST = HostPaths(
    driver_root=Path("/"),
    hami_library=Path("/usr/local/vgpu/libvgpu.so"),
    hami_preload_file=STATE / "ld.so.preload",
    hami_cache_dir=STATE / "claims" / UID,
    hami_lock_dir=STATE / "lock",
    mps_pipe_dir=Path("/run/nvidia/mps"),
)


def card_uuid(index: int) -> str:
    return f"GPU-{index:08x}-aaaa-4bbb-8ccc-dddddddddddd"


def card(index: int, bus: int, *, minor: int | None = None, memory: int = 16 * GIB) -> Card:
    return Card(
        uuid=card_uuid(index),
        product_name="Tesla T4",
        memory_bytes=memory,
        pci_bus_id=f"0000:{bus:02x}:00.0",
        minor=index if minor is None else minor,
        index=index,
        architecture="Turing",
        cuda_compute_capability="7.5",
        driver_version="550.54.15",
    )


def share(
    of: Card,
    cores: int = 100,
    memory: int | None = None,
    share_id: str | None = None,
    request: str = "gpu",
) -> CardShare:
    return CardShare(
        card=of,
        cores=cores,
        memory_bytes=of.memory_bytes if memory is None else memory,
        share_id=share_id,
        request=request,
    )


def config(
    isolation: Isolation = Isolation.FIXED_SHARE,
    priority: Priority = Priority.ONLINE,
    backend: Backend | None = Backend.HAMI_CORE,
) -> EffectiveConfig:
    return EffectiveConfig(isolation=isolation, priority=priority, placement=None, backend=backend)


def host_with(**changes: Path) -> HostPaths:
    return dataclasses.replace(HOST, **changes)
