"""Container edits for a prepared claim: device nodes, quota environment and interception mounts.

Pure functions from (the claim's shares, its effective config, the node's host paths) to
:class:`~dra_driver.cdi.spec.ContainerEdits`. The kubelet gives a container the CDI devices
of the requests it names, and a runtime applies a spec's claim-wide edits once, then each
injected device's own edits, later values winning. So edits come in two parts:

- :func:`claim_edits`: what every container using the claim gets whatever it names: control
  device nodes, ``CUDA_DEVICE_ORDER``, ``NVIDIA_VISIBLE_DEVICES=void``, the backend's
  switches and mounts;
- :func:`request_edits`: what a container naming one request gets for it, carried by every
  device of that request (the same values, so they never conflict): the per-card limits,
  numbered 0.. by PCI bus ID over the request's cards, which is how CUDA numbers the cards the
  container sees (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, only those cards' device nodes), never by
  the host's NVML index; and, for HAMi-core, the request's own region file.

A container that gets devices of two requests of this driver would see two numberings; the
admission webhook refuses such pods. Several shares of one card in one request add up to one
limit for that card.

A policy the chosen backend cannot enforce raises
:class:`~dra_driver.cdi.shares.UnsupportedPolicyError` (see :mod:`dra_driver.cdi.policy`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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
    check_request_name,
)
from dra_driver.cdi.policy import refusal, refuse_partial_exclusive, refuse_unsupported
from dra_driver.cdi.shares import (
    CardLimit,
    CardShare,
    InvalidShareError,
    UnsupportedPolicyError,
    card_limits,
)
from dra_driver.cdi.spec import READ_WRITE_BIND, ContainerEdits, DeviceNode, Hook, Mount
from dra_driver.nvml.card import Card

CONTROL_NODES: Final = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

# HAMi-core's fixed container layout: CUDA_REDIRECT defaults to this library path.
HAMI_LIBRARY_PATH: Final = "/usr/local/vgpu/libvgpu.so"
HAMI_CACHE_DIR: Final = "/usr/local/vgpu/cache"
REGION_SUFFIX: Final = ".cache"
"""A request's region file is ``<request><suffix>`` in the claim's host directory."""
HAMI_PRELOAD_PATH: Final = "/etc/ld.so.preload"
HAMI_LOCK_DIR: Final = "/tmp/vgpulock"  # noqa: S108 - HAMi-core's fixed flock directory
MPS_PIPE_DIR: Final = "/tmp/nvidia-mps"  # noqa: S108 - where the container finds the daemon
MPS_SHM_DIR: Final = "/dev/shm"  # noqa: S108 - the daemon's shared memory, as NVIDIA mounts it

HAMI_UTILIZATION_POLICY: Final = {
    Isolation.FIXED_SHARE: "force",
    Isolation.BURST_SHARE: "default",
    Isolation.BEST_EFFORT: "disable",
    Isolation.EXCLUSIVE: "disable",
}
# Lower is more important in both: HAMi's CUDA_TASK_PRIORITY and MPS's client priority.
PRIORITY_LEVEL: Final = {Priority.ONLINE: 0, Priority.OFFLINE: 1}

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class HostPaths:
    """Host paths the container edits point at; ``hami_cache_dir`` is the claim's own.

    ``driver_files`` are the driver's libraries and binaries (host path, container path) to
    mount read-only; ``ldcache_hook`` is the NVIDIA Container Toolkit's ``nvidia-cdi-hook``,
    when the node has it, to add their directories to the container's ld.so cache.
    """

    driver_root: Path
    hami_library: Path
    hami_preload_file: Path
    hami_cache_dir: Path
    hami_lock_dir: Path
    mps_pipe_dir: Path
    mps_shm_dir: Path | None = None
    driver_files: tuple[tuple[str, str], ...] = ()
    ldcache_hook: str | None = None
    ldcache_dirs: tuple[str, ...] = ()


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


def card_node(card: Card, host: HostPaths) -> DeviceNode:
    """Return the device node of one card, from under the driver root."""
    driver_root = Path(_host_path("driver_root", host.driver_root))
    return _device_node(f"/dev/nvidia{card.minor}", driver_root)


def region_file(request: str) -> str:
    """Return where a request's HAMi-core region is in the container."""
    return f"{HAMI_CACHE_DIR}/{check_request_name(request)}{REGION_SUFFIX}"


def claim_edits(
    claim_uid: str, config: EffectiveConfig, backend: Backend, host: HostPaths
) -> ContainerEdits:
    """Return what every container using the claim gets once, whatever requests it names."""
    driver_root = Path(_host_path("driver_root", host.driver_root))
    env = [
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        # Under NVIDIA's runtime an image's NVIDIA_VISIBLE_DEVICES=all would add every card.
        "NVIDIA_VISIBLE_DEVICES=void",
        f"GPUSHARE_CLAIM_UID={check_env_value('claim UID', check_claim_uid(claim_uid))}",
        f"GPUSHARE_ISOLATION={config.isolation}",
        f"GPUSHARE_PRIORITY={config.priority}",
        f"GPUSHARE_BACKEND={backend}",
    ]
    mounts: list[Mount] = []
    if backend is Backend.HAMI_CORE:
        env += [
            f"GPU_CORE_UTILIZATION_POLICY={HAMI_UTILIZATION_POLICY[config.isolation]}",
            f"CUDA_TASK_PRIORITY={PRIORITY_LEVEL[config.priority]}",
        ]
        mounts += [
            Mount(_host_path("hami_library", host.hami_library), HAMI_LIBRARY_PATH),
            Mount(_host_path("hami_preload_file", host.hami_preload_file), HAMI_PRELOAD_PATH),
            Mount(
                _host_path("hami_cache_dir", host.hami_cache_dir), HAMI_CACHE_DIR, READ_WRITE_BIND
            ),
            Mount(_host_path("hami_lock_dir", host.hami_lock_dir), HAMI_LOCK_DIR, READ_WRITE_BIND),
        ]
    elif backend is Backend.MPS:
        env += [
            f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_DIR}",
            f"CUDA_MPS_CLIENT_PRIORITY={PRIORITY_LEVEL[config.priority]}",
        ]
        mounts.append(
            Mount(_host_path("mps_pipe_dir", host.mps_pipe_dir), MPS_PIPE_DIR, READ_WRITE_BIND)
        )
        if host.mps_shm_dir is not None:
            # Clients reach the control daemon through its shared memory as well as its pipes.
            shm = _host_path("mps_shm_dir", host.mps_shm_dir)
            mounts.append(Mount(shm, MPS_SHM_DIR, READ_WRITE_BIND))
    mounts += [
        Mount(_host_path("driver file", Path(host_file)), _host_path("driver file", Path(target)))
        for host_file, target in host.driver_files
    ]
    hooks: tuple[Hook, ...] = ()
    if host.ldcache_hook and host.ldcache_dirs:
        hook = _host_path("ldcache_hook", Path(host.ldcache_hook))
        folders = [arg for d in host.ldcache_dirs for arg in ("--folder", d)]
        hooks = (Hook(hook, ("nvidia-cdi-hook", "update-ldcache", *folders)),)
    return ContainerEdits(
        env=tuple(env),
        device_nodes=tuple(_device_node(path, driver_root) for path in CONTROL_NODES),
        mounts=tuple(mounts),
        hooks=hooks,
    )


def request_edits(
    request: str, limits: Sequence[CardLimit], config: EffectiveConfig, backend: Backend
) -> ContainerEdits:
    """Return the per-card environment of one request, numbered over the request's cards.

    Raise :class:`UnsupportedPolicyError` for what the backend cannot enforce on them.
    """
    refuse_unsupported(backend, config, limits)
    uuids = [check_env_value("card UUID", check_card_uuid(limit.card.uuid)) for limit in limits]
    env = [
        f"GPUSHARE_REQUEST={check_request_name(request)}",
        f"GPUSHARE_DEVICE_UUIDS={','.join(uuids)}",
    ]
    for limit in limits:
        env.append(f"GPUSHARE_CORES_{limit.ordinal}={limit.cores}")
        env.append(f"GPUSHARE_MEMORY_BYTES_{limit.ordinal}={limit.memory_bytes}")
    if backend is Backend.HAMI_CORE:
        for limit in limits:
            env.append(f"CUDA_DEVICE_MEMORY_LIMIT_{limit.ordinal}={limit.memory_mib}m")
            env.append(f"CUDA_DEVICE_SM_LIMIT_{limit.ordinal}={limit.cores}")
        env.append(f"CUDA_DEVICE_MEMORY_SHARED_CACHE={region_file(request)}")
    elif backend is Backend.MPS:
        env += _mps_limits(limits, config)
    return ContainerEdits(env=tuple(env))


def _mps_limits(limits: Sequence[CardLimit], config: EffectiveConfig) -> list[str]:
    memory = ",".join(f"{limit.ordinal}={limit.memory_mib}M" for limit in limits)
    env = [f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={memory}"]
    if config.isolation is Isolation.FIXED_SHARE:
        if len({limit.cores for limit in limits}) > 1:
            cores = ", ".join(f"{limit.cores} on {limit.describe()}" for limit in limits)
            raise refusal(
                Backend.MPS,
                "isolation",
                config.isolation,
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is one value per client, but the cores "
                f"differ by card: {cores}; request the same cores on every card, or use backend "
                f"{quote(Backend.HAMI_CORE)}",
            )
        env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={limits[0].cores}")
    return env


@dataclass(frozen=True)
class ClaimEdits:
    """A claim's edits: once per container, and per request (on each of its devices)."""

    claim: ContainerEdits
    requests: Mapping[str, ContainerEdits]


def _backend(config: EffectiveConfig) -> Backend:
    if config.backend is None:
        raise UnsupportedPolicyError(
            "backend: not set; resolve it to the node's default backend before building the "
            "container edits"
        )
    return config.backend


def build_claim_edits(
    claim_uid: str, shares: Sequence[CardShare], config: EffectiveConfig, host: HostPaths
) -> ClaimEdits:
    """Return the claim-wide edits and each request's (``CardShare.request`` is the request).

    ``config.backend`` must be resolved (the node's default filled in). Raise
    :class:`UnsupportedPolicyError` for a policy the backend cannot enforce (or an impossible
    share, :class:`InvalidShareError`) and :class:`UnsafeNameError` for an unsafe claim UID,
    request name, share ID, card UUID or host path.
    """
    check_claim_uid(claim_uid)
    backend = _backend(config)
    if not shares:
        raise InvalidShareError("shares: none given; a claim needs at least one card")
    if config.isolation is Isolation.EXCLUSIVE:
        refuse_partial_exclusive(backend, shares)
    by_request: dict[str, list[CardShare]] = {}
    for share in shares:
        by_request.setdefault(share.request, []).append(share)
    requests = {
        request: request_edits(request, card_limits(grouped), config, backend)
        for request, grouped in by_request.items()
    }
    return ClaimEdits(claim_edits(claim_uid, config, backend, host), requests)


def build_edits(
    claim_uid: str, shares: Sequence[CardShare], config: EffectiveConfig, host: HostPaths
) -> ContainerEdits:
    """Return everything a container gets that names the one request ``shares`` belong to.

    The claim-wide edits, the request's, and its cards' device nodes, merged as a runtime
    merges them. Raises as :func:`build_claim_edits` does, and :class:`InvalidShareError` if
    the shares belong to several requests (no container gets two requests' devices).
    """
    requests = {share.request for share in shares}
    if len(requests) > 1:
        raise InvalidShareError(
            f"shares of requests {', '.join(sorted(requests))}: a container gets one request's"
        )
    edits = build_claim_edits(claim_uid, shares, config, host)
    nodes = tuple(dict.fromkeys(card_node(limit.card, host) for limit in card_limits(shares)))
    (request,) = edits.requests.values()
    return ContainerEdits(device_nodes=nodes).merge(edits.claim).merge(request)
