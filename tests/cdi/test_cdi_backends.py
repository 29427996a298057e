"""Container edits per backend: exact env, mounts and device nodes, and every refusal."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from cdi.factories import (
    GIB,
    HOST,
    MIB,
    SHARE_1,
    SHARE_2,
    STATE,
    UID,
    card,
    card_uuid,
    config,
    host_with,
    share,
)

from dra_driver.api import Backend, Isolation, Priority
from dra_driver.cdi import (
    ContainerEdits,
    DeviceNode,
    Hook,
    InvalidShareError,
    Mount,
    UnsafeNameError,
    UnsupportedPolicyError,
    build_claim_edits,
    build_edits,
    card_limits,
)

RO = ("ro", "nosuid", "nodev", "bind")
RW = ("rw", "nosuid", "nodev", "bind")
CARD = card(0, 0x3B)  # 16 GiB
U0 = card_uuid(0)
CONTROL = tuple(
    DeviceNode(p) for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
)
NODES = (DeviceNode("/dev/nvidia0"), *CONTROL)
HAMI_MOUNTS = (
    Mount("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", RO),
    Mount(f"{STATE}/ld.so.preload", "/etc/ld.so.preload", RO),
    Mount(f"{STATE}/claims/{UID}", "/usr/local/vgpu/cache", RW),
    Mount(f"{STATE}/lock", "/tmp/vgpulock", RW),
)
MPS_MOUNTS = (Mount("/run/nvidia/mps", "/tmp/nvidia-mps", RW),)


def claim_env(isolation: str, priority: str, backend: str) -> tuple[str, ...]:
    """Return what every container of the claim gets, before the backend's claim-wide items."""
    return (
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        "NVIDIA_VISIBLE_DEVICES=void",
        f"GPUSHARE_CLAIM_UID={UID}",
        f"GPUSHARE_ISOLATION={isolation}",
        f"GPUSHARE_PRIORITY={priority}",
        f"GPUSHARE_BACKEND={backend}",
    )


def request_env(cores: int, memory: int) -> tuple[str, ...]:
    """Return the GPUSHARE_* items of request "gpu" on one card."""
    return (
        "GPUSHARE_REQUEST=gpu",
        f"GPUSHARE_DEVICE_UUIDS={U0}",
        f"GPUSHARE_CORES_0={cores}",
        f"GPUSHARE_MEMORY_BYTES_0={memory}",
    )


def one_card(isolation: Isolation) -> tuple[int, int]:
    """Return a 30-core 5 GiB share, or the whole card where exclusive demands it."""
    return (100, 16 * GIB) if isolation is Isolation.EXCLUSIVE else (30, 5 * GIB)


def test_hami_core_fixed_share_online_full_table() -> None:
    """The runbook case: one card, 30 cores, 5 GiB, fixed-share, online, spelled out whole."""
    edits = build_edits(UID, [share(CARD, 30, 5 * GIB, SHARE_1)], config(), HOST)
    assert edits == ContainerEdits(
        env=(
            "CUDA_DEVICE_ORDER=PCI_BUS_ID",
            "NVIDIA_VISIBLE_DEVICES=void",
            f"GPUSHARE_CLAIM_UID={UID}",
            "GPUSHARE_ISOLATION=fixed-share",
            "GPUSHARE_PRIORITY=online",
            "GPUSHARE_BACKEND=hami-core",
            "GPU_CORE_UTILIZATION_POLICY=force",
            "CUDA_TASK_PRIORITY=0",
            "GPUSHARE_REQUEST=gpu",
            "GPUSHARE_DEVICE_UUIDS=GPU-00000000-aaaa-4bbb-8ccc-dddddddddddd",
            "GPUSHARE_CORES_0=30",
            "GPUSHARE_MEMORY_BYTES_0=5368709120",
            "CUDA_DEVICE_MEMORY_LIMIT_0=5120m",
            "CUDA_DEVICE_SM_LIMIT_0=30",
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/cache/gpu.cache",
        ),
        device_nodes=(
            DeviceNode("/dev/nvidia0", None, "rw"),
            DeviceNode("/dev/nvidiactl", None, "rw"),
            DeviceNode("/dev/nvidia-uvm", None, "rw"),
            DeviceNode("/dev/nvidia-uvm-tools", None, "rw"),
        ),
        mounts=HAMI_MOUNTS,
    )


HAMI_TABLE = [
    (Isolation.FIXED_SHARE, Priority.ONLINE, "force", "0"),
    (Isolation.FIXED_SHARE, Priority.OFFLINE, "force", "1"),
    (Isolation.BURST_SHARE, Priority.ONLINE, "default", "0"),
    (Isolation.BURST_SHARE, Priority.OFFLINE, "default", "1"),
    (Isolation.BEST_EFFORT, Priority.ONLINE, "disable", "0"),
    (Isolation.EXCLUSIVE, Priority.ONLINE, "disable", "0"),
    (Isolation.EXCLUSIVE, Priority.OFFLINE, "disable", "1"),
]


@pytest.mark.parametrize(("isolation", "priority", "policy", "task_priority"), HAMI_TABLE)
def test_hami_core_table(
    isolation: Isolation, priority: Priority, policy: str, task_priority: str
) -> None:
    """hami-core: utilization policy follows isolation, task priority follows priority."""
    cores, memory = one_card(isolation)
    edits = build_edits(UID, [share(CARD, cores, memory)], config(isolation, priority), HOST)
    assert edits == ContainerEdits(
        env=(
            *claim_env(isolation, priority, "hami-core"),
            f"GPU_CORE_UTILIZATION_POLICY={policy}",
            f"CUDA_TASK_PRIORITY={task_priority}",
            *request_env(cores, memory),
            f"CUDA_DEVICE_MEMORY_LIMIT_0={memory // MIB}m",
            f"CUDA_DEVICE_SM_LIMIT_0={cores}",
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/cache/gpu.cache",
        ),
        device_nodes=NODES,
        mounts=HAMI_MOUNTS,
    )


MPS_TABLE = [
    (Isolation.FIXED_SHARE, Priority.ONLINE, ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",), "0"),
    (Isolation.FIXED_SHARE, Priority.OFFLINE, ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",), "1"),
    (Isolation.BEST_EFFORT, Priority.ONLINE, (), "0"),
    (Isolation.BEST_EFFORT, Priority.OFFLINE, (), "1"),
    (Isolation.EXCLUSIVE, Priority.ONLINE, (), "0"),
    (Isolation.EXCLUSIVE, Priority.OFFLINE, (), "1"),
]


@pytest.mark.parametrize(("isolation", "priority", "threads", "client_priority"), MPS_TABLE)
def test_mps_table(
    isolation: Isolation, priority: Priority, threads: tuple[str, ...], client_priority: str
) -> None:
    """mps: pinned memory always, thread percentage only for fixed-share, client priority."""
    cores, memory = one_card(isolation)
    edits = build_edits(
        UID, [share(CARD, cores, memory)], config(isolation, priority, Backend.MPS), HOST
    )
    assert edits == ContainerEdits(
        env=(
            *claim_env(isolation, priority, "mps"),
            "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
            f"CUDA_MPS_CLIENT_PRIORITY={client_priority}",
            *request_env(cores, memory),
            f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={memory // MIB}M",
            *threads,
        ),
        device_nodes=NODES,
        mounts=MPS_MOUNTS,
    )


@pytest.mark.parametrize("priority", list(Priority))
@pytest.mark.parametrize("isolation", list(Isolation))
def test_none_backend_sets_only_the_common_items(isolation: Isolation, priority: Priority) -> None:
    """backend none: device nodes, CUDA_DEVICE_ORDER and GPUSHARE_* only, no mounts."""
    cores, memory = one_card(isolation)
    edits = build_edits(
        UID, [share(CARD, cores, memory)], config(isolation, priority, Backend.NONE), HOST
    )
    assert edits == ContainerEdits(
        env=(*claim_env(isolation, priority, "none"), *request_env(cores, memory)),
        device_nodes=NODES,
    )


def test_driver_root_puts_host_paths_under_it() -> None:
    """With a driver root other than /, every device node names its host path under it."""
    host = host_with(driver_root=Path("/run/nvidia/driver"))
    edits = build_edits(UID, [share(CARD)], config(backend=Backend.NONE), host)
    assert edits.device_nodes == tuple(
        DeviceNode(path, f"/run/nvidia/driver{path}")
        for path in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
    )


def test_two_cards_are_numbered_by_pci_bus_not_host_index() -> None:
    """Given in reverse bus order, the limits are keyed by PCI order: host index 1 is ordinal 0."""
    high = card(0, 0x3B, minor=0)  # host index 0, higher bus
    low = card(1, 0x1A, minor=1)  # host index 1, lower bus: CUDA ordinal 0 in the container
    shares = [share(high, 30, 5 * GIB, SHARE_1), share(low, 40, 2 * GIB, SHARE_2)]
    edits = build_edits(UID, shares, config(), HOST)
    assert edits.env == (
        *claim_env("fixed-share", "online", "hami-core"),
        "GPU_CORE_UTILIZATION_POLICY=force",
        "CUDA_TASK_PRIORITY=0",
        "GPUSHARE_REQUEST=gpu",
        f"GPUSHARE_DEVICE_UUIDS={card_uuid(1)},{card_uuid(0)}",
        "GPUSHARE_CORES_0=40",
        f"GPUSHARE_MEMORY_BYTES_0={2 * GIB}",
        "GPUSHARE_CORES_1=30",
        f"GPUSHARE_MEMORY_BYTES_1={5 * GIB}",
        "CUDA_DEVICE_MEMORY_LIMIT_0=2048m",
        "CUDA_DEVICE_SM_LIMIT_0=40",
        "CUDA_DEVICE_MEMORY_LIMIT_1=5120m",
        "CUDA_DEVICE_SM_LIMIT_1=30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/cache/gpu.cache",
    )
    assert edits.device_nodes == (DeviceNode("/dev/nvidia1"), DeviceNode("/dev/nvidia0"), *CONTROL)


def test_two_cards_mps_memory_list_in_pci_order() -> None:
    """mps: the pinned memory list is <ordinal>=<MiB>M in PCI order, one thread percentage."""
    high, low = card(0, 0x3B), card(1, 0x1A)
    shares = [share(high, 50, 5 * GIB), share(low, 50, 3 * GIB)]
    edits = build_edits(UID, shares, config(backend=Backend.MPS), HOST)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=3072M,1=5120M" in edits.env
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in edits.env


def test_same_card_twice_is_summed() -> None:
    """Two shares of one card in one claim become one limit: cores and memory added."""
    shares = [share(CARD, 30, 5 * GIB, SHARE_1), share(CARD, 40, 3 * GIB, SHARE_2)]
    edits = build_edits(UID, shares, config(), HOST)
    assert f"GPUSHARE_DEVICE_UUIDS={U0}" in edits.env
    assert "GPUSHARE_CORES_0=70" in edits.env
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=8192m" in edits.env
    assert "CUDA_DEVICE_SM_LIMIT_0=70" in edits.env
    assert not any(entry.startswith("GPUSHARE_CORES_1=") for entry in edits.env)
    assert edits.device_nodes == NODES


def test_summed_shares_are_capped_at_the_card() -> None:
    """Summed cores stop at 100 and summed memory at the card's size."""
    limits = card_limits([share(CARD, 60, 10 * GIB), share(CARD, 70, 10 * GIB)])
    assert [(lim.ordinal, lim.cores, lim.memory_bytes) for lim in limits] == [(0, 100, 16 * GIB)]


def test_memory_limit_rounds_down_to_whole_mib() -> None:
    """A share that is not whole MiB is limited to the MiB below it, never above the share."""
    edits = build_edits(UID, [share(CARD, 30, 5 * GIB + MIB - 1)], config(), HOST)
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=5120m" in edits.env
    assert f"GPUSHARE_MEMORY_BYTES_0={5 * GIB + MIB - 1}" in edits.env


def _refusal(shares, cfg) -> str:
    with pytest.raises(UnsupportedPolicyError) as caught:
        build_edits(UID, shares, cfg, HOST)
    return str(caught.value)


def test_mps_refuses_burst_share() -> None:
    """MPS cannot lend idle compute, so burst-share is refused with what to use instead."""
    message = _refusal(
        [share(CARD, 30, 5 * GIB)], config(Isolation.BURST_SHARE, backend=Backend.MPS)
    )
    assert message == (
        'backend "mps": isolation "burst-share": the MPS active thread percentage is a hard cap '
        'and cannot lend idle compute; use isolation "fixed-share" or "best-effort", or backend '
        '"hami-core"'
    )


def test_mps_refuses_different_cores_per_card() -> None:
    """MPS has one thread percentage per client: different cores per card are refused."""
    shares = [share(card(0, 0x3B), 30, GIB), share(card(1, 0x1A), 50, GIB)]
    message = _refusal(shares, config(backend=Backend.MPS))
    assert message == (
        'backend "mps": isolation "fixed-share": CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is one value '
        f"per client, but the cores differ by card: 50 on card 0 ({card_uuid(1)}), 30 on card 1 "
        f'({card_uuid(0)}); request the same cores on every card, or use backend "hami-core"'
    )


@pytest.mark.parametrize("backend", [Backend.HAMI_CORE, Backend.MPS, Backend.NONE])
def test_exclusive_refuses_partial_cards(backend: Backend) -> None:
    """exclusive needs whole cards, whatever the backend; the message says what to remove."""
    message = _refusal([share(CARD, 30, 5 * GIB)], config(Isolation.EXCLUSIVE, backend=backend))
    assert message == (
        f'backend "{backend}": isolation "exclusive": request "gpu" has 30 of 100 cores and 5Gi '
        f"of 16Gi memory of card {U0}; exclusive needs whole cards; remove the capacity requests"
    )


def test_exclusive_refuses_all_cores_with_part_of_the_memory() -> None:
    """100 cores are not enough for exclusive: all memory is needed too."""
    message = _refusal([share(CARD, 100, 8 * GIB)], config(Isolation.EXCLUSIVE))
    assert message == (
        'backend "hami-core": isolation "exclusive": request "gpu" has 100 of 100 cores and 8Gi '
        f"of 16Gi memory of card {U0}; exclusive needs whole cards; remove the capacity requests"
    )


@pytest.mark.parametrize(
    ("backend", "why"),
    [
        (Backend.HAMI_CORE, "HAMi-core reads CUDA_DEVICE_SM_LIMIT 0 as no limit"),
        (Backend.MPS, "a 0% active thread percentage leaves the client no SMs"),
    ],
)
def test_fixed_share_refuses_zero_cores(backend: Backend, why: str) -> None:
    """A fixed share of 0 cores cannot be enforced (HAMi would not cap it at all)."""
    message = _refusal([share(CARD, 0, GIB)], config(backend=backend))
    assert message == (
        f'backend "{backend}": isolation "fixed-share": card 0 ({U0}) has 0 cores, and {why}; '
        'request at least 1 core, or use isolation "best-effort"'
    )


def test_zero_cores_are_fine_outside_fixed_share() -> None:
    """A memory-only share is accepted where compute is shared anyway."""
    edits = build_edits(UID, [share(CARD, 0, GIB)], config(Isolation.BEST_EFFORT), HOST)
    assert "CUDA_DEVICE_SM_LIMIT_0=0" in edits.env


def test_hami_core_refuses_more_than_sixteen_cards() -> None:
    """HAMi-core keeps per-ordinal limits for 16 devices; a 17-card claim is refused."""
    shares = [share(card(i, 0x10 + i)) for i in range(17)]
    assert _refusal(shares, config()) == (
        'backend "hami-core": cards "17": HAMi-core limits at most 16 cards per container '
        '(CUDA_DEVICE_MAX_COUNT); request at most 16 cards, or use backend "none"'
    )
    assert build_edits(UID, shares[:16], config(), HOST).env[-1].startswith("CUDA_DEVICE_MEMORY")


def test_unresolved_backend_is_refused() -> None:
    """The node default must be filled in before building edits."""
    assert _refusal([share(CARD)], config(backend=None)) == (
        "backend: not set; resolve it to the node's default backend before building the "
        "container edits"
    )


MEMORY_RULE = "must be at least 1Mi and at most the card's 16Gi"
CORES_RULE = "must be between 0 and 100"
IMPOSSIBLE = [
    ([], "shares: none given; a claim needs at least one card"),
    ([share(CARD, 101, GIB)], f'request "gpu": cores 101 on card {U0}: {CORES_RULE}'),
    ([share(CARD, -1, GIB)], f'request "gpu": cores -1 on card {U0}: {CORES_RULE}'),
    ([share(CARD, True, GIB)], f'request "gpu": cores True on card {U0}: {CORES_RULE}'),
    ([share(CARD, 30, 0)], f'request "gpu": memory 0 on card {U0}: {MEMORY_RULE}'),
    (
        [share(CARD, 30, 17 * GIB, request="big")],
        f'request "big": memory 17Gi on card {U0}: {MEMORY_RULE}',
    ),
    (
        [share(card(0, 0x3B)), share(card(1, 0x3B))],
        f"card 0000:3b:00.0: given as {U0} and {card_uuid(1)}; one PCI bus ID is one card",
    ),
]


@pytest.mark.parametrize(
    ("shares", "message"),
    IMPOSSIBLE,
    ids=["empty", "cores-high", "cores-low", "cores-bool", "memory-0", "memory-over", "bus-clash"],
)
def test_impossible_shares_are_refused(shares: list, message: str) -> None:
    """Out-of-range or inconsistent shares raise InvalidShareError, an UnsupportedPolicyError."""
    with pytest.raises(InvalidShareError) as caught:
        build_edits(UID, shares, config(), HOST)
    assert str(caught.value) == message


UNSAFE = [
    ("../etc", [share(CARD)], HOST, "claim UID"),
    (UID, [share(CARD, share_id="../x")], HOST, "share ID"),
    (UID, [share(CARD)], host_with(driver_root=Path("run/nvidia")), "host path driver_root"),
    (UID, [share(CARD)], host_with(hami_cache_dir=STATE / ".." / "x"), "host path hami_cache_dir"),
    (UID, [share(CARD)], host_with(hami_library=Path("/a\nb")), "host path hami_library"),
]


@pytest.mark.parametrize(("uid", "shares", "host", "field"), UNSAFE)
def test_unsafe_inputs_are_refused(uid: str, shares: list, host: object, field: str) -> None:
    """A claim UID, share ID or host path that could escape its place raises UnsafeNameError."""
    with pytest.raises(UnsafeNameError) as caught:
        build_edits(uid, shares, config(), host)
    assert caught.value.field == field


def test_unsafe_card_uuid_never_reaches_the_env() -> None:
    """A card UUID with a separator is refused, even if it bypassed the inventory's check."""
    forged = card(0, 0x3B)
    object.__setattr__(forged, "uuid", "GPU-a,GPU-b")
    with pytest.raises(UnsafeNameError, match=r'^invalid card UUID "GPU-a,GPU-b"'):
        build_edits(UID, [share(forged)], config(backend=Backend.NONE), HOST)


def test_hami_core_refuses_offline_best_effort() -> None:
    """An offline task HAMi-core never rate-limits could never be held for online work."""
    message = _refusal([share(CARD, 30, 5 * GIB)], config(Isolation.BEST_EFFORT, Priority.OFFLINE))
    assert message == (
        'backend "hami-core": isolation "best-effort": HAMi-core holds an offline task\'s kernel '
        "launches only while it limits the task's cores, and best-effort never limits them: "
        'the task could not be suspended for online work; use isolation "fixed-share" or '
        '"burst-share", or priority "online"'
    )


def test_requests_get_their_own_limits_numbered_from_zero_and_their_own_region() -> None:
    """Two requests on two cards: each numbers its card 0, and names its own region file."""
    first, second = card(0, 0x3B), card(1, 0x1A)
    edits = build_claim_edits(
        UID,
        [share(first, 40, 8 * GIB, request="a"), share(second, 10, 2 * GIB, request="b")],
        config(),
        HOST,
    )
    a, b = (dict(e.partition("=")[::2] for e in edits.requests[r].env) for r in ("a", "b"))
    assert (a["CUDA_DEVICE_MEMORY_LIMIT_0"], a["CUDA_DEVICE_SM_LIMIT_0"]) == ("8192m", "40")
    assert (b["CUDA_DEVICE_MEMORY_LIMIT_0"], b["CUDA_DEVICE_SM_LIMIT_0"]) == ("2048m", "10")
    assert a["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/cache/a.cache"
    assert b["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/cache/b.cache"
    assert not any(entry.startswith("CUDA_DEVICE_") for entry in edits.claim.env[1:])
    with pytest.raises(InvalidShareError, match="a container gets one request's"):
        build_edits(UID, [share(first, request="a"), share(second, request="b")], config(), HOST)


def test_driver_files_are_mounted_read_only_with_an_ld_cache_hook() -> None:
    """Every container of the claim gets the driver's files, and the toolkit's hook if known."""
    files = (
        ("/run/nvidia/driver/usr/lib64/libcuda.so.550.54.15", "/usr/lib64/libcuda.so.550.54.15"),
        ("/run/nvidia/driver/usr/lib64/libcuda.so.550.54.15", "/usr/lib64/libcuda.so.1"),
    )
    host = host_with(driver_root=Path("/run/nvidia/driver"))
    host = dataclasses.replace(
        host,
        driver_files=files,
        ldcache_hook="/usr/bin/nvidia-cdi-hook",
        ldcache_dirs=("/usr/lib64",),
    )
    edits = build_edits(UID, [share(CARD)], config(backend=Backend.NONE), host)
    assert [m for m in edits.mounts if m.container_path.startswith("/usr/lib64")] == [
        Mount(host_file, target, RO) for host_file, target in files
    ]
    assert edits.hooks == (
        Hook(
            "/usr/bin/nvidia-cdi-hook",
            ("nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64"),
        ),
    )
    without = build_edits(UID, [share(CARD)], config(backend=Backend.NONE), HOST)
    assert without.hooks == ()


def test_mps_clients_get_the_daemons_shared_memory() -> None:
    """The control daemon's /dev/shm directory is mounted where clients look for it."""
    host = dataclasses.replace(HOST, mps_shm_dir=Path("/run/nvidia/mps/shm"))
    edits = build_edits(UID, [share(CARD, 30, GIB)], config(backend=Backend.MPS), host)
    assert Mount("/run/nvidia/mps/shm", "/dev/shm", RW) in edits.mounts
