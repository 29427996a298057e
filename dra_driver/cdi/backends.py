"""Container edits for a prepared claim: device nodes, quota environment and interception mounts.

Pure functions from (the claim's shares, its effective config, the node's host paths) to
:class:`~dra_driver.cdi.spec.ContainerEdits` (DESIGN §6). Inside the container the cards are
numbered by PCI bus ID (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, only the claim's cards visible), so
every per-card limit is keyed by that ordinal, never by the host's NVML index. Several shares
of one card in one claim add up to one limit for that card.

A policy the chosen backend cannot enforce raises :class:`UnsupportedPolicyError`, worded
``backend "<backend>": <field> <value>: <why>; <what to use instead>``, for example::

    backend "mps": isolation "burst-share": the MPS active thread percentage is a hard cap and
    cannot lend idle compute; use isolation "fixed-share" or "best-effort", or backend
    "hami-core"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dra_driver.api import Backend, EffectiveConfig, Isolation, Priority
from dra_driver.api.errors import quote
from dra_driver.cdi.names import (
    UnsafeNameError,
    check_card_uuid,
    check_claim_uid,
    check_env_value,
    check_share_id,
)
from dra_driver.cdi.spec import READ_ONLY_BIND, READ_WRITE_BIND, ContainerEdits, DeviceNode, Mount
from dra_driver.nvml.inventory import Card, format_quantity

MIB: Final = 2**20
FULL_CORES: Final = 100
CONTROL_NODES: Final = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

# HAMi-core's fixed container layout: CUDA_REDIRECT defaults to this library path.
HAMI_LIBRARY_PATH: Final = "/usr/local/vgpu/libvgpu.so"
HAMI_CACHE_DIR: Final = "/usr/local/vgpu/cache"
HAMI_CACHE_FILE: Final = f"{HAMI_CACHE_DIR}/cudevshr.cache"
HAMI_PRELOAD_PATH: Final = "/etc/ld.so.preload"
HAMI_LOCK_DIR: Final = "/tmp/vgpulock"  # noqa: S108 - HAMi-core's fixed flock directory
HAMI_MAX_CARDS: Final = 16  # CUDA_DEVICE_MAX_COUNT: the per-ordinal limit arrays have 16 slots
MPS_PIPE_DIR: Final = "/tmp/nvidia-mps"  # noqa: S108 - where the container finds the daemon

HAMI_UTILIZATION_POLICY: Final = {
    Isolation.FIXED_SHARE: "force",
    Isolation.BURST_SHARE: "default",
    Isolation.BEST_EFFORT: "disable",
    Isolation.EXCLUSIVE: "disable",
}
# Lower is more important in both: HAMi's CUDA_TASK_PRIORITY and MPS's client priority.
PRIORITY_LEVEL: Final = {Priority.ONLINE: 0, Priority.OFFLINE: 1}

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


class UnsupportedPolicyError(ValueError):
    """The claim's policy cannot be enforced by its backend; the message says what to use."""


class InvalidShareError(UnsupportedPolicyError):
    """A share's numbers or card are impossible (out of range, inconsistent): nothing to build."""


@dataclass(frozen=True)
class CardShare:
    """One allocation result resolved to its card; a whole card is 100 cores and all memory."""

    card: Card
    cores: int
    memory_bytes: int
    share_id: str | None
    request: str


@dataclass(frozen=True)
class HostPaths:
    """Host paths the container edits point at; ``hami_cache_dir`` is the claim's own."""

    driver_root: Path
    hami_library: Path
    hami_preload_file: Path
    hami_cache_dir: Path
    hami_lock_dir: Path
    mps_pipe_dir: Path


@dataclass(frozen=True)
class CardLimit:
    """The claim's total share of one card, at CUDA ordinal ``ordinal`` in the container."""

    ordinal: int
    card: Card
    cores: int
    memory_bytes: int

    @property
    def memory_mib(self) -> int:
        """The memory limit in whole MiB, rounded down so that it never exceeds the share."""
        return self.memory_bytes // MIB

    def describe(self) -> str:
        """Name the card for a message: ``card 0 (GPU-…)``."""
        return f"card {self.ordinal} ({self.card.uuid})"


def _reason(backend: Backend, field: str, value: str, why: str) -> str:
    return f"backend {quote(backend)}: {field} {quote(value)}: {why}"


def _refuse(backend: Backend, field: str, value: str, why: str) -> UnsupportedPolicyError:
    return UnsupportedPolicyError(_reason(backend, field, value, why))


# Why a fixed-share limit of 0 cores cannot be enforced, per backend that enforces cores.
_ZERO_CORES: Final = {
    Backend.HAMI_CORE: "HAMi-core reads CUDA_DEVICE_SM_LIMIT 0 as no limit",
    Backend.MPS: "a 0% active thread percentage leaves the client no SMs",
}


def unsupported_policy(
    backend: Backend,
    isolation: Isolation,
    *,
    cores: Sequence[tuple[str, int]] = (),
    cards: int = 0,
) -> str | None:
    """Return why ``backend`` cannot enforce ``isolation`` for these shares, or ``None``.

    ``cores`` pairs a name for each share's limit (a card in the container, or a request)
    with its cores; ``cards`` is how many cards the container gets. The kubelet plugin passes
    the claim's per-card limits, the admission webhook each request before any card is chosen,
    so both refuse with the same words. Checks that depend on which cards shares land on stay
    with the backend's edits.
    """
    if backend is Backend.MPS and isolation is Isolation.BURST_SHARE:
        return _reason(
            backend,
            "isolation",
            isolation,
            "the MPS active thread percentage is a hard cap and cannot lend idle compute; use "
            f"isolation {quote(Isolation.FIXED_SHARE)} or {quote(Isolation.BEST_EFFORT)}, or "
            f"backend {quote(Backend.HAMI_CORE)}",
        )
    if backend is Backend.HAMI_CORE and cards > HAMI_MAX_CARDS:
        return _reason(
            backend,
            "cards",
            str(cards),
            f"HAMi-core limits at most {HAMI_MAX_CARDS} cards per container "
            f"(CUDA_DEVICE_MAX_COUNT); request at most {HAMI_MAX_CARDS} cards, or use backend "
            f"{quote(Backend.NONE)}",
        )
    why = _ZERO_CORES.get(backend)
    if why is None or isolation is not Isolation.FIXED_SHARE:
        return None
    for name, share_cores in cores:
        if share_cores == 0:
            return _reason(
                backend,
                "isolation",
                isolation,
                f"{name} has 0 cores, and {why}; request at least 1 core, or use isolation "
                f"{quote(Isolation.BEST_EFFORT)}",
            )
    return None


def _refuse_unsupported(
    backend: Backend, config: EffectiveConfig, limits: Sequence[CardLimit]
) -> None:
    problem = unsupported_policy(
        backend,
        config.isolation,
        cores=[(limit.describe(), limit.cores) for limit in limits],
        cards=len(limits),
    )
    if problem is not None:
        raise UnsupportedPolicyError(problem)


def _check_share(share: CardShare) -> None:
    where = f"request {quote(share.request)}"
    card = f"card {share.card.uuid}"
    cores, memory = share.cores, share.memory_bytes
    if isinstance(cores, bool) or not isinstance(cores, int) or not 0 <= cores <= FULL_CORES:
        raise InvalidShareError(
            f"{where}: cores {cores!r} on {card}: must be between 0 and {FULL_CORES}"
        )
    total = share.card.memory_bytes
    if isinstance(memory, bool) or not isinstance(memory, int) or not MIB <= memory <= total:
        # As a claim writes it (64Gi), not as a byte count nobody typed.
        amount = format_quantity(memory) if type(memory) is int and memory > 0 else repr(memory)
        raise InvalidShareError(
            f"{where}: memory {amount} on {card}: must be at least 1Mi and at most the "
            f"card's {format_quantity(total)}"
        )
    if share.share_id is not None:
        check_share_id(share.share_id)


def card_limits(shares: Sequence[CardShare]) -> tuple[CardLimit, ...]:
    """Sum the shares per card and number the cards by PCI bus ID, as CUDA will in the container.

    Cores are capped at 100 and memory at the card's size. Raise :class:`InvalidShareError` for
    an empty claim, a share out of range, or two cards that claim one PCI bus ID.
    """
    if not shares:
        raise InvalidShareError("shares: none given; a claim needs at least one card")
    totals: dict[str, tuple[Card, int, int]] = {}
    for share in shares:
        _check_share(share)
        card = share.card
        known, cores, memory = totals.get(card.pci_bus_id, (card, 0, 0))
        if known.uuid != card.uuid:
            raise InvalidShareError(
                f"card {card.pci_bus_id}: given as {known.uuid} and {card.uuid}; one PCI bus "
                "ID is one card"
            )
        totals[card.pci_bus_id] = (card, cores + share.cores, memory + share.memory_bytes)
    return tuple(
        CardLimit(i, card, min(cores, FULL_CORES), min(memory, card.memory_bytes))
        for i, (card, cores, memory) in enumerate(totals[bus] for bus in sorted(totals))
    )


def _host_path(field: str, path: Path) -> str:
    text = str(path)
    if not path.is_absolute() or ".." in path.parts or _CONTROL.search(text):
        raise UnsafeNameError(
            f"host path {field}",
            text,
            "must be absolute, without '..' segments or control characters",
        )
    return text


def _device_node(path: str, driver_root: Path) -> DeviceNode:
    if driver_root == Path("/"):
        return DeviceNode(path)
    return DeviceNode(path, host_path=str(driver_root / path.lstrip("/")))


def common_edits(
    claim_uid: str,
    limits: Sequence[CardLimit],
    config: EffectiveConfig,
    backend: Backend,
    host: HostPaths,
) -> ContainerEdits:
    """Return what every backend gets: device nodes, ``CUDA_DEVICE_ORDER``, ``GPUSHARE_*``."""
    driver_root = Path(_host_path("driver_root", host.driver_root))
    nodes = [f"/dev/nvidia{limit.card.minor}" for limit in limits]
    uuids = [check_env_value("card UUID", check_card_uuid(limit.card.uuid)) for limit in limits]
    env = [
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        f"GPUSHARE_CLAIM_UID={check_env_value('claim UID', check_claim_uid(claim_uid))}",
        f"GPUSHARE_DEVICE_UUIDS={','.join(uuids)}",
    ]
    for limit in limits:
        env.append(f"GPUSHARE_CORES_{limit.ordinal}={limit.cores}")
        env.append(f"GPUSHARE_MEMORY_BYTES_{limit.ordinal}={limit.memory_bytes}")
    env += [
        f"GPUSHARE_ISOLATION={config.isolation}",
        f"GPUSHARE_PRIORITY={config.priority}",
        f"GPUSHARE_BACKEND={backend}",
    ]
    return ContainerEdits(
        env=tuple(env),
        device_nodes=tuple(_device_node(path, driver_root) for path in (*nodes, *CONTROL_NODES)),
    )


def hami_core_edits(
    limits: Sequence[CardLimit], config: EffectiveConfig, host: HostPaths
) -> ContainerEdits:
    """Return HAMi-core's ``libvgpu.so`` env contract and mounts (prior-art §1.1 and §1.2)."""
    _refuse_unsupported(Backend.HAMI_CORE, config, limits)
    env: list[str] = []
    for limit in limits:
        env.append(f"CUDA_DEVICE_MEMORY_LIMIT_{limit.ordinal}={limit.memory_mib}m")
        env.append(f"CUDA_DEVICE_SM_LIMIT_{limit.ordinal}={limit.cores}")
    env += [
        f"GPU_CORE_UTILIZATION_POLICY={HAMI_UTILIZATION_POLICY[config.isolation]}",
        f"CUDA_TASK_PRIORITY={PRIORITY_LEVEL[config.priority]}",
        f"CUDA_DEVICE_MEMORY_SHARED_CACHE={HAMI_CACHE_FILE}",
    ]
    mounts = (
        Mount(_host_path("hami_library", host.hami_library), HAMI_LIBRARY_PATH, READ_ONLY_BIND),
        Mount(
            _host_path("hami_preload_file", host.hami_preload_file),
            HAMI_PRELOAD_PATH,
            READ_ONLY_BIND,
        ),
        Mount(_host_path("hami_cache_dir", host.hami_cache_dir), HAMI_CACHE_DIR, READ_WRITE_BIND),
        Mount(_host_path("hami_lock_dir", host.hami_lock_dir), HAMI_LOCK_DIR, READ_WRITE_BIND),
    )
    return ContainerEdits(env=tuple(env), mounts=mounts)


def mps_edits(
    limits: Sequence[CardLimit], config: EffectiveConfig, host: HostPaths
) -> ContainerEdits:
    """Return the NVIDIA MPS client env: pipe directory, memory, thread share, priority."""
    backend = Backend.MPS
    _refuse_unsupported(backend, config, limits)
    memory = ",".join(f"{limit.ordinal}={limit.memory_mib}M" for limit in limits)
    env = [f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_DIR}", f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={memory}"]
    if config.isolation is Isolation.FIXED_SHARE:
        if len({limit.cores for limit in limits}) > 1:
            cores = ", ".join(f"{limit.cores} on {limit.describe()}" for limit in limits)
            raise _refuse(
                backend,
                "isolation",
                config.isolation,
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is one value per client, but the cores "
                f"differ by card: {cores}; request the same cores on every card, or use backend "
                f"{quote(Backend.HAMI_CORE)}",
            )
        env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={limits[0].cores}")
    env.append(f"CUDA_MPS_CLIENT_PRIORITY={PRIORITY_LEVEL[config.priority]}")
    pipe = Mount(_host_path("mps_pipe_dir", host.mps_pipe_dir), MPS_PIPE_DIR, READ_WRITE_BIND)
    return ContainerEdits(env=tuple(env), mounts=(pipe,))


def _no_edits(
    limits: Sequence[CardLimit],  # noqa: ARG001 - the backend signature
    config: EffectiveConfig,  # noqa: ARG001
    host: HostPaths,  # noqa: ARG001
) -> ContainerEdits:
    return ContainerEdits()


_BACKENDS: Final[
    dict[Backend, Callable[[Sequence[CardLimit], EffectiveConfig, HostPaths], ContainerEdits]]
] = {Backend.HAMI_CORE: hami_core_edits, Backend.MPS: mps_edits, Backend.NONE: _no_edits}


def _refuse_partial_exclusive(backend: Backend, shares: Sequence[CardShare]) -> None:
    for share in shares:
        # What the slice offers (and a request-less claim consumes), not the raw card bytes.
        total = share.card.shareable_memory_bytes
        if share.cores != FULL_CORES or share.memory_bytes != total:
            raise _refuse(
                backend,
                "isolation",
                Isolation.EXCLUSIVE,
                f"request {quote(share.request)} has {share.cores} of {FULL_CORES} cores and "
                f"{format_quantity(share.memory_bytes)} of {format_quantity(total)} memory of "
                f"card {share.card.uuid}; exclusive needs whole cards; remove the capacity "
                "requests",
            )


def build_edits(
    claim_uid: str, shares: Sequence[CardShare], config: EffectiveConfig, host: HostPaths
) -> ContainerEdits:
    """Return the claim-wide container edits for ``shares`` under ``config`` (DESIGN §6).

    ``config.backend`` must be resolved (the node's default filled in). Raise
    :class:`UnsupportedPolicyError` for a policy the backend cannot enforce (or an impossible
    share, :class:`InvalidShareError`) and :class:`UnsafeNameError` for an unsafe claim UID,
    share ID, card UUID or host path.
    """
    check_claim_uid(claim_uid)
    backend = config.backend
    if backend is None:
        raise UnsupportedPolicyError(
            "backend: not set; resolve it to the node's default backend before building the "
            "container edits"
        )
    limits = card_limits(shares)
    if config.isolation is Isolation.EXCLUSIVE:
        _refuse_partial_exclusive(backend, shares)
    common = common_edits(claim_uid, limits, config, backend, host)
    return common.merge(_BACKENDS[backend](limits, config, host))
