"""From a ResourceClaim to what its containers get: the pure part of preparing a claim.

Given the claim object, the node's cards and the plugin's defaults, pick this driver's results,
merge this driver's configs (class entries first, then the claim's), turn consumed capacity
into per-card shares, and build the CDI spec. No I/O: :mod:`state` does that around it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.api import Backend, ConfigError, DriverNames, EffectiveConfig
from dra_driver.cdi import (
    CardShare,
    CdiDevice,
    CdiSpec,
    ContainerEdits,
    HostPaths,
    UnsafeNameError,
    UnsupportedPolicyError,
    build_edits,
    card_limits,
    cdi_device_name,
    check_device_name,
    check_request_name,
    check_share_id,
    qualified_name,
)
from dra_driver.k8s.quantity import QuantityError, ceil_int, parse_quantity
from dra_driver.kubeletplugin.checkpoint import PreparedDevice, ShareCard, ShareInfo
from dra_driver.kubeletplugin.slices import device_name
from dra_driver.nvml.inventory import Card
from dra_driver.structured.config import parent_request, share_config

Object = dict[str, Any]


class ClaimError(Exception):
    """This claim cannot be prepared; the message is returned to the kubelet for this claim."""


@dataclasses.dataclass(frozen=True)
class PreparedClaim:
    """The outcome of preparing one claim: the kubelet's answer and the CDI spec to write."""

    devices: tuple[PreparedDevice, ...]
    spec: CdiSpec
    config: EffectiveConfig
    share: ShareInfo


def _effective(
    names: DriverNames, allocation: Object, results: Sequence[Object]
) -> EffectiveConfig:
    effective: EffectiveConfig | None = None
    for result in results:
        try:
            current = share_config(
                (allocation.get("devices") or {}).get("config") or [],
                names,
                result["request"],
                path="status.allocation.devices.config",
            ).effective()
        except ConfigError as exc:
            raise ClaimError(f"invalid config: {exc}") from exc
        # Placement is the controller's business; the node enforces only these three.
        if effective is not None and _enforced(current) != _enforced(effective):
            raise ClaimError(
                "the requests of one claim must share isolation, priority and backend; "
                f"request {result['request']} differs"
            )
        effective = current
    if effective is None:
        raise ClaimError(f"the allocation has no devices of driver {names.driver}")
    return effective


def _enforced(config: EffectiveConfig) -> tuple[object, ...]:
    return (config.isolation, config.priority, config.backend)


def _checked_results(allocation: Object) -> list[Object]:
    """Return the allocation's results, refusing shapes no API server would have stored."""
    devices = allocation.get("devices") or {}
    results = devices.get("results") if isinstance(devices, dict) else None
    if not isinstance(results, list):
        raise ClaimError("status.allocation.devices.results is missing or not a list")
    for index, result in enumerate(results):
        if not isinstance(result, dict) or not all(
            isinstance(result.get(key), str) for key in ("request", "driver", "pool", "device")
        ):
            raise ClaimError(
                f"status.allocation.devices.results[{index}] is malformed: it needs string "
                "fields request, driver, pool and device"
            )
    return results


def _share(result: Object, card: Card) -> CardShare:
    consumed = result.get("consumedCapacity") or {}
    if not isinstance(consumed, dict) or not all(isinstance(v, str) for v in consumed.values()):
        raise ClaimError(
            f"result for device {result['device']}: consumedCapacity must map names to "
            "quantity strings"
        )
    try:
        cores = ceil_int(parse_quantity(consumed["cores"])) if "cores" in consumed else 100
        memory = (
            ceil_int(parse_quantity(consumed["memory"]))
            if "memory" in consumed
            else card.memory_bytes
        )
    except QuantityError as exc:
        raise ClaimError(f"result for device {result['device']}: {exc}") from exc
    return CardShare(
        card=card, cores=cores, memory_bytes=memory, share_id=result.get("shareID"),
        request=result["request"],
    )  # fmt: skip


def prepare_claim(
    names: DriverNames,
    node_name: str,
    claim: Object,
    *,
    cards: Sequence[Card],
    default_backend: Backend,
    host: HostPaths,
) -> PreparedClaim:
    """Work out the answer and CDI spec for ``claim``; raise :class:`ClaimError` if impossible."""
    uid = claim["metadata"]["uid"]
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError("the claim is not allocated")
    results = [r for r in _checked_results(allocation) if r["driver"] == names.driver]
    by_name: Mapping[str, Card] = {device_name(card): card for card in cards}
    shares: list[CardShare] = []
    for result in results:
        try:
            check_device_name(result["device"])
            check_request_name(parent_request(result["request"]))
            if result.get("shareID") is not None:
                check_share_id(result["shareID"])
        except UnsafeNameError as exc:
            raise ClaimError(str(exc)) from exc
        if result.get("pool") != node_name:
            raise ClaimError(
                f"device {result['device']} is in pool {result.get('pool')!r}, not {node_name!r}"
            )
        card = by_name.get(result["device"])
        if card is None:
            raise ClaimError(f"device {result['device']} is not a card of node {node_name}")
        shares.append(_share(result, card))
    effective = _effective(names, allocation, results)
    if effective.backend is None:
        effective = dataclasses.replace(effective, backend=default_backend)
    try:
        edits = build_edits(uid, shares, effective, host)
    except UnsupportedPolicyError as exc:
        raise ClaimError(str(exc)) from exc
    info = _share_info(claim, shares, effective)
    return _assemble(
        names, uid, results=results, shares=shares, edits=edits, effective=effective, info=info
    )


def _share_info(claim: Object, shares: Sequence[CardShare], config: EffectiveConfig) -> ShareInfo:
    """Return what the node monitor and metrics trust about the claim (the API's view)."""
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    pods = tuple(
        str(ref.get("name"))
        for ref in reserved
        if isinstance(ref, dict) and ref.get("resource") == "pods" and ref.get("name")
    )
    return ShareInfo(
        backend=str(config.backend),
        isolation=str(config.isolation),
        priority=str(config.priority),
        pods=pods,
        cards=tuple(
            ShareCard(limit.card.uuid, limit.cores, limit.memory_bytes)
            for limit in card_limits(shares)
        ),
    )


def _assemble(
    names: DriverNames,
    uid: str,
    *,
    results: Sequence[Object],
    shares: Sequence[CardShare],
    edits: ContainerEdits,
    effective: EffectiveConfig,
    info: ShareInfo,
) -> PreparedClaim:
    """One CDI device per result, claim-wide edits at spec level (applied once per container)."""
    devices: list[CdiDevice] = []
    answer: list[PreparedDevice] = []
    for index, (result, share) in enumerate(zip(results, shares, strict=True)):
        name = cdi_device_name(uid, result["device"], result.get("shareID"))
        node_path = f"/dev/nvidia{share.card.minor}"
        nodes = tuple(n for n in edits.device_nodes if n.path == node_path)
        # A CDI device needs at least one edit of its own; the share ID identifies it.
        own = ContainerEdits(
            env=(f"GPUSHARE_SHARE_{index}={result.get('shareID') or 'whole-card'}",),
            device_nodes=nodes,
        )
        devices.append(CdiDevice(name=name, edits=own))
        answer.append(
            PreparedDevice(
                request_names=(parent_request(result["request"]),),
                pool_name=result["pool"],
                device_name=result["device"],
                cdi_device_ids=(qualified_name(names, name),),
                share_id=result.get("shareID"),
            )
        )
    card_nodes = {f"/dev/nvidia{s.card.minor}" for s in shares}
    shared = dataclasses.replace(
        edits, device_nodes=tuple(n for n in edits.device_nodes if n.path not in card_nodes)
    )
    spec = CdiSpec(kind=names.cdi_kind, devices=tuple(devices), edits=shared)
    return PreparedClaim(tuple(answer), spec, effective, info)
