"""Shares sized by ``GpuShareConfig`` on cards the API server only lets us publish whole.

Without consumable capacity (Kubernetes 1.34 and 1.35 as shipped) the API server drops
``shareID`` and ``consumedCapacity`` from allocation results, so every result on a card reads
as a whole-card allocation. The controller still gives one such card to several claims: it is
the only allocator of shares there, and each share's size travels in the allocation's config
(``cores``, ``memory``), which the API server keeps. kube-scheduler treats a card with any
allocation as in use, so it never adds to such a card; it only allocates idle cards, whole.

This module turns a stored claim into the claim as it is *counted*: each result of ours that
was written as a config-sized share gets a share ID and the consumed amounts its config gives,
so the ordinary accounting of :class:`~dra_driver.structured.allocated.AllocatedState` applies.
A result stays a whole card when kube-scheduler allocated the claim (it adds
``resource.kubernetes.io/delete-protection`` exactly when it allocates), when its config sets
no size, asks for ``exclusive`` isolation or cannot be read, and when the size does not fit the
card. Every such rule errs towards counting more, never less. Pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, Final

from dra_driver.api import ConfigError, DriverNames, EffectiveConfig, Isolation
from dra_driver.api.fields import CORES, MEMORY, MIB, CoresCodec, MemoryCodec
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import QuantityError, parse_quantity
from dra_driver.structured.allocated import DeviceId
from dra_driver.structured.config import share_config
from dra_driver.structured.consumable import (
    Capacity,
    CapacityRejected,
    check_within,
    consumed_capacity,
    format_consumed,
    parse_capacities,
)

SCHEDULER_FINALIZER: Final = "resource.kubernetes.io/delete-protection"
"""kube-scheduler adds it to a claim in the same step as it allocates the claim."""
_SHARE_PREFIX: Final = "config/"
"""Counted share IDs start with this; real ones are UUIDs, so they never collide."""


def config_amounts(config: EffectiveConfig) -> dict[str, Fraction]:
    """Return the capacity requests a config's ``cores`` and ``memory`` stand for."""
    amounts: dict[str, Fraction] = {}
    if config.cores is not None:
        amounts[CORES] = Fraction(config.cores)
    if config.memory is not None:
        amounts[MEMORY] = Fraction(config.memory)
    return amounts


def config_size(name: str, text: str) -> str | None:
    """Return a capacity request's amount as the config field ``name`` writes it.

    ``None`` when the amount has no exact equivalent there (12.5 cores, 1536Ki, 101 cores),
    or the config has no such field: it takes whole cores from 0 to 100 and whole MiB from 1Mi.
    """
    if name not in (CORES, MEMORY):
        return None
    try:
        amount = parse_quantity(text)
    except QuantityError:
        return None
    if amount.denominator != 1 or (name == MEMORY and amount % MIB):
        return None
    codec: CoresCodec | MemoryCodec = CoresCodec() if name == CORES else MemoryCodec()
    value = codec.encode(int(amount))
    try:
        codec.decode(value, name)
    except ConfigError:
        return None
    return value


def allocated_by_scheduler(claim: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler allocated the claim (it alone adds delete-protection)."""
    metadata = objects.metadata(claim)
    return SCHEDULER_FINALIZER in (metadata.get("finalizers") or ())


def counted_claim(
    claim: Object,
    names: DriverNames,
    capacities: Callable[[DeviceId], Mapping[str, Capacity] | None],
) -> Object:
    """Return ``claim`` with its config-sized results counted as shares; others unchanged.

    ``capacities`` gives the capacity of one of our cards, ``None`` for a device it does not
    know. The claim is not modified; a copy is returned when anything changes.
    """
    allocation = objects.status(claim).get("allocation")
    if not isinstance(allocation, dict) or allocated_by_scheduler(claim):
        return claim
    devices = allocation.get("devices")
    if not isinstance(devices, dict) or not isinstance(devices.get("results"), list):
        return claim
    results: list[object] = devices["results"]
    uid = str(objects.metadata(claim).get("uid") or "")
    configs = devices.get("config")
    counted = [
        _counted(
            result,
            share_id=f"{_SHARE_PREFIX}{uid}/{index}",
            configs=configs if isinstance(configs, list) else [],
            names=names,
            capacities=capacities,
        )
        for index, result in enumerate(results)
    ]
    if all(new is old for new, old in zip(counted, results, strict=True)):
        return claim
    status = {**claim["status"], "allocation": {**allocation, "devices": {**devices}}}
    status["allocation"]["devices"]["results"] = counted
    return {**claim, "status": status}


def _counted(
    result: object,
    *,
    share_id: str,
    configs: list[object],
    names: DriverNames,
    capacities: Callable[[DeviceId], Mapping[str, Capacity] | None],
) -> object:
    if not isinstance(result, dict) or result.get("shareID") is not None:
        return result
    known = None
    if not result.get("adminAccess") and result.get("driver") == names.driver:
        known = capacities((names.driver, str(result.get("pool")), str(result.get("device"))))
    config = _sized_config(result, configs, names) if known else None
    if not known or config is None:
        return result
    try:
        consumed = consumed_capacity(known, config_amounts(config))
        check_within(known, consumed)
    except CapacityRejected:
        return result
    return {**result, "shareID": share_id, "consumedCapacity": format_consumed(known, consumed)}


def _sized_config(
    result: Mapping[str, Any], configs: list[object], names: DriverNames
) -> EffectiveConfig | None:
    """Return the result's config when it sizes a share; None when it means the whole card."""
    try:
        config = share_config(
            configs,  # type: ignore[arg-type]  # entries are checked as they are read
            names,
            str(result.get("request", "")),
            path="status.allocation.devices.config",
        ).effective()
    except (ConfigError, TypeError, AttributeError):
        return None  # the plugin refuses such a claim; it still holds the card
    if not config.sized or config.isolation is Isolation.EXCLUSIVE:
        return None
    return config


def slice_capacities(
    slices: Iterable[Mapping[str, Any]], driver: str
) -> dict[DeviceId, Mapping[str, Capacity]]:
    """Return the capacities of ``driver``'s devices, each pool's newest generation winning.

    For readers outside the controller (status, reports, checks); a malformed device is left
    out, and its results are then counted as they are written.
    """
    ours = [s.get("spec") or {} for s in slices if objects.spec(s).get("driver") == driver]
    found: dict[DeviceId, Mapping[str, Capacity]] = {}
    for spec in sorted(ours, key=lambda spec: int((spec.get("pool") or {}).get("generation") or 0)):
        pool = str((spec.get("pool") or {}).get("name") or "")
        for device in spec.get("devices") or []:
            try:
                found[(driver, pool, str(device["name"]))] = parse_capacities(device)
            except (KeyError, TypeError, ValueError):
                continue
    return found


def counted_claims(
    claims: Iterable[Object],
    names: DriverNames,
    capacities: Mapping[DeviceId, Mapping[str, Capacity]],
) -> list[Object]:
    """Return :func:`counted_claim` of each claim, the cards' capacities given as a mapping."""
    return [counted_claim(claim, names, capacities.get) for claim in claims]
