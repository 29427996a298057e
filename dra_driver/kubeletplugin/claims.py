"""From a ResourceClaim to what its containers get: the pure part of preparing a claim.

Given the claim object, the node's cards and the plugin's defaults, pick this driver's results,
merge this driver's configs (class entries first, then the claim's), turn consumed capacity
(or the whole card, on a plain device), capped by the config's cores and memory, into
per-card shares, and build the CDI spec. No I/O: :mod:`state` does that around it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.api import Backend, ConfigError, DriverNames, EffectiveConfig, Isolation
from dra_driver.cdi import (
    CardShare,
    CdiDevice,
    CdiSpec,
    ClaimEdits,
    ContainerEdits,
    HostPaths,
    UnsafeNameError,
    UnsupportedPolicyError,
    build_claim_edits,
    card_limits,
    card_node,
    cdi_device_name,
    check_device_name,
    check_request_name,
    check_share_id,
    qualified_name,
)
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import (
    QuantityError,
    QuantityFormat,
    ceil_int,
    format_quantity,
    parse_quantity,
)
from dra_driver.kubeletplugin.devicestatus import DeviceStatus
from dra_driver.kubeletplugin.entries import PreparedDevice, ShareCard, ShareInfo
from dra_driver.nvml.card import Card
from dra_driver.publishing.slices import device_name
from dra_driver.structured.config import parent_request, share_config


class ClaimError(Exception):
    """This claim cannot be prepared; the message is returned to the kubelet for this claim."""


@dataclasses.dataclass(frozen=True)
class PreparedClaim:
    """The outcome of preparing one claim: the kubelet's answer and the CDI spec to write."""

    devices: tuple[PreparedDevice, ...]
    spec: CdiSpec
    config: EffectiveConfig
    share: ShareInfo
    statuses: tuple[DeviceStatus, ...]
    """What each device gave the containers, for the claim's ``status.devices``."""


def _configs(
    names: DriverNames, allocation: Object, results: Sequence[Object]
) -> list[EffectiveConfig]:
    """Return each result's effective config, refusing a claim whose requests disagree.

    Sizes may differ by request; isolation, priority and backend apply to the whole claim.
    """
    configs: list[EffectiveConfig] = []
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
        if configs and _enforced(current) != _enforced(configs[-1]):
            raise ClaimError(
                "the requests of one claim must share isolation, priority and backend; "
                f"request {result['request']} differs"
            )
        configs.append(current)
    if not configs:
        raise ClaimError(f"the allocation has no devices of driver {names.driver}")
    return configs


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


def _allocated(result: Object, card: Card) -> tuple[int, int]:
    """Return the cores and memory the allocation counted: its consumedCapacity, or the card."""
    consumed = result.get("consumedCapacity") or {}
    if not isinstance(consumed, dict) or not all(isinstance(v, str) for v in consumed.values()):
        raise ClaimError(
            f"result for device {result['device']}: consumedCapacity must map names to "
            "quantity strings"
        )
    # What the slice offers and a whole-card claim consumes: exclusive compares against it.
    whole_memory = card.shareable_memory_bytes
    try:
        cores = ceil_int(parse_quantity(consumed["cores"])) if "cores" in consumed else 100
        memory = (
            ceil_int(parse_quantity(consumed["memory"])) if "memory" in consumed else whole_memory
        )
    except QuantityError as exc:
        raise ClaimError(f"result for device {result['device']}: {exc}") from exc
    return cores, memory


def _share(
    result: Object, card: Card, allocated: tuple[int, int], config: EffectiveConfig
) -> CardShare:
    cores, memory = allocated
    # Without consumable capacity the controller shares a plain card by the config's sizes,
    # and the API server keeps no consumedCapacity: the config is then the only record of the
    # share. Capped, never raised: the limit stays within what the allocation counted.
    # Exclusive is the whole card whatever the sizes say.
    if config.isolation is not Isolation.EXCLUSIVE:
        if config.cores is not None:
            cores = min(cores, config.cores)
        if config.memory is not None:
            memory = min(memory, config.memory)
    # The parent request of a firstAvailable subrequest: the name containers give, and the
    # one the kubelet matches devices by.
    return CardShare(
        card=card, cores=cores, memory_bytes=memory, share_id=result.get("shareID"),
        request=parent_request(result["request"]),
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
    allocation = objects.status(claim).get("allocation")
    if not allocation:
        raise ClaimError("the claim is not allocated")
    results = [r for r in _checked_results(allocation) if r["driver"] == names.driver]
    by_name: Mapping[str, Card] = {device_name(card): card for card in cards}
    resolved: list[tuple[Card, tuple[int, int]]] = []
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
        resolved.append((card, _allocated(result, card)))
    admin = _admin_access(results)
    configs = _configs(names, allocation, results)
    shares = [
        _share(result, card, allocated, config)
        for result, (card, allocated), config in zip(results, resolved, configs, strict=True)
    ]
    # Sizes are per request and already in the shares; what is left applies to every request.
    # Admin access is for monitoring: the card is seen, nothing intercepts or limits it.
    backend = Backend.NONE if admin else configs[-1].backend or default_backend
    effective = dataclasses.replace(configs[-1], backend=backend, cores=None, memory=None)
    try:
        edits = build_claim_edits(uid, shares, effective, host)
    except UnsupportedPolicyError as exc:
        raise ClaimError(str(exc)) from exc
    info = _share_info(claim, shares, effective, backend)
    if admin:  # not a share: the node monitor and the usage metrics leave it alone
        info = dataclasses.replace(info, cards=())
    if effective.backend is Backend.HAMI_CORE and len(info.pods) > 1:
        # One accounting region per request: the pods' processes cannot see each other, and
        # HAMi-core forgets the ones it cannot see, so each pod would erase the other's use.
        raise ClaimError(
            f"the claim is reserved for pods {', '.join(info.pods)}: with backend hami-core a "
            "claim serves one pod; give each pod a claim of its own (a ResourceClaimTemplate)"
        )
    return _assemble(
        names,
        uid,
        results=results,
        shares=shares,
        edits=edits,
        effective=effective,
        info=info,
        host=host,
    )


def _admin_access(results: Sequence[Object]) -> bool:
    """Whether the claim's results are admin access; a claim is all admin access or none."""
    kinds = {bool(result.get("adminAccess")) for result in results}
    if len(kinds) > 1:
        raise ClaimError(
            "the claim mixes admin-access results with shares: admin access and shares are "
            "prepared differently, so they need separate claims"
        )
    return kinds == {True}


def _share_info(
    claim: Object, shares: Sequence[CardShare], config: EffectiveConfig, backend: Backend
) -> ShareInfo:
    """Return what the node monitor and metrics trust about the claim (the API's view)."""
    reserved = objects.status(claim).get("reservedFor") or []
    pods = tuple(
        str(ref.get("name"))
        for ref in reserved
        if isinstance(ref, dict) and ref.get("resource") == "pods" and ref.get("name")
    )
    return ShareInfo(
        backend=backend,
        isolation=config.isolation,
        priority=config.priority,
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
    edits: ClaimEdits,
    effective: EffectiveConfig,
    info: ShareInfo,
    host: HostPaths,
) -> PreparedClaim:
    """One CDI device per result, carrying its card and its request's limits.

    Claim-wide edits sit at spec level, applied once to every container that gets any of the
    claim's devices; each device brings its own card's node and its request's per-card
    environment, so a container naming one request is told that request's shares, numbered
    over that request's cards, and nothing of the others'.
    """
    devices: list[CdiDevice] = []
    answer: list[PreparedDevice] = []
    statuses: list[DeviceStatus] = []
    positions: dict[str, int] = {}
    for result, share in zip(results, shares, strict=True):
        position = positions.get(share.request, 0)
        positions[share.request] = position + 1
        name = cdi_device_name(uid, result["device"], result.get("shareID"))
        own = ContainerEdits(
            env=(f"GPUSHARE_SHARE_{position}={result.get('shareID') or 'whole-card'}",),
            device_nodes=(card_node(share.card, host),),
        )
        devices.append(CdiDevice(name=name, edits=edits.requests[share.request].merge(own)))
        answer.append(
            PreparedDevice(
                request_names=(share.request,),
                pool_name=result["pool"],
                device_name=result["device"],
                cdi_device_ids=(qualified_name(names, name),),
                share_id=result.get("shareID"),
            )
        )
        statuses.append(_status(result, share, effective))
    spec = CdiSpec(kind=names.cdi_kind, devices=tuple(devices), edits=edits.claim)
    return PreparedClaim(tuple(answer), spec, effective, info, tuple(statuses))


def _status(result: Object, share: CardShare, effective: EffectiveConfig) -> DeviceStatus:
    """Say what one result's share gives its containers: the card and the share's limits."""
    card = {
        "uuid": share.card.uuid,
        "pciBusID": share.card.pci_bus_id,
        "productName": share.card.product_name,
        "request": share.request,
    }
    if result.get("adminAccess"):
        shared: dict[str, Any] = {"adminAccess": True}
    else:
        shared = {
            "cores": share.cores,
            "memory": format_quantity(share.memory_bytes, QuantityFormat.BINARY),
            "isolation": str(effective.isolation),
            "priority": str(effective.priority),
        }
    data = {**card, **shared, "backend": str(effective.backend)}
    return DeviceStatus(result["pool"], result["device"], result.get("shareID"), data)
