"""What an allocated claim takes of a namespace's quotas, and whether an allocation fits them.

A result with a share takes its consumed cores and memory; a result without one holds the
card whole: 100 cores, the card's memory, and one card. Admin-access results take nothing
(they watch a card, they do not use it). Each result counts under its own request's priority,
so a quota limited to ``offline`` counts only offline shares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, Final

from dra_driver.api import ConfigError, DriverNames, Priority
from dra_driver.api.fields import CORES, MAX_CORES, MEMORY
from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from dra_driver.k8s.quantity import QuantityError, parse_quantity
from dra_driver.quota.model import RESOURCES, Amounts, Quota, render_amount
from dra_driver.structured.config import share_config
from dra_driver.structured.configshares import (
    allocated_by_scheduler,
    counted_claims,
    slice_capacities,
)

CardMemory = Callable[[str, str], Fraction | None]
"""(pool, device) -> the card's memory in bytes; ``None`` for a card not of this driver."""

_MALFORMED: Final = (TypeError, ValueError, KeyError, AttributeError, QuantityError)


@dataclasses.dataclass(frozen=True)
class ClaimUse:
    """What one allocated claim takes, per priority of its requests."""

    namespace: str
    name: str
    by_priority: Mapping[Priority, Amounts]

    def counted_by(self, quota: Quota) -> Amounts:
        """Return what this claim takes of ``quota`` (nothing if another namespace's)."""
        if self.namespace != quota.namespace:
            return Amounts()
        total = Amounts()
        for priority, amounts in self.by_priority.items():
            if quota.counts(priority):
                total += amounts
        return total


def claim_use(claim: ObjectView, names: DriverNames, card_memory: CardMemory) -> ClaimUse | None:
    """Return what ``claim``'s allocation takes of this driver's cards; ``None`` if nothing.

    Malformed results are skipped: the allocator and the kubelet plugin report those.
    """
    allocation = objects.status(claim).get("allocation")
    if not isinstance(allocation, dict):
        return None
    devices = allocation.get("devices") or {}
    try:
        results = list(devices.get("results") or [])
        configs = list(devices.get("config") or [])
    except _MALFORMED:
        return None
    by_priority: dict[Priority, Amounts] = {}
    for result in results:
        try:
            taken = _result_amounts(result, names, card_memory)
        except _MALFORMED:
            continue
        if taken is None:
            continue
        priority = _priority(configs, names, str(result.get("request", "")))
        by_priority[priority] = by_priority.get(priority, Amounts()) + taken
    if not by_priority:
        return None
    return ClaimUse(objects.namespace(claim), objects.name(claim), by_priority)


def _result_amounts(
    result: Mapping[str, Any], names: DriverNames, card_memory: CardMemory
) -> Amounts | None:
    if result.get("driver") != names.driver or result.get("adminAccess"):
        return None
    memory = card_memory(str(result.get("pool")), str(result.get("device")))
    if memory is None:
        return None
    if result.get("shareID"):
        consumed = result.get("consumedCapacity") or {}
        return Amounts(cores=_quantity(consumed.get(CORES)), memory=_quantity(consumed.get(MEMORY)))
    return Amounts(cores=Fraction(MAX_CORES), memory=memory, cards=Fraction(1))


def _quantity(value: object) -> Fraction:
    return Fraction(0) if value is None else parse_quantity(str(value))


def _priority(configs: list[Mapping[str, Any]], names: DriverNames, request: str) -> Priority:
    try:
        config = share_config(configs, names, request, path="status.allocation.devices.config")
    except (ConfigError, *_MALFORMED):
        config = share_config([], names, "", path="")  # counted at the defaults
    return config.effective().priority


@dataclasses.dataclass(frozen=True)
class Breach:
    """One resource a quota would be over: what is used, what is asked, what it allows."""

    quota: Quota
    resource: str
    used: Fraction
    asked: Fraction
    hard: Fraction

    def __str__(self) -> str:
        """``GpuShareQuota team-a/gpu: cores used 70, asked 40, hard 100``."""
        return (
            f"GpuShareQuota {self.quota.key}: {self.resource} used "
            f"{render_amount(self.resource, self.used)}, asked "
            f"{render_amount(self.resource, self.asked)}, hard "
            f"{render_amount(self.resource, self.hard)}"
        )


def breaches(quota: Quota, used: Amounts, asked: Amounts) -> list[Breach]:
    """Return each resource ``asked`` needs of ``quota`` beyond what it has left.

    A resource not asked for is never breached, even when others already pushed it over.
    """
    found = []
    for resource in RESOURCES:
        hard = quota.hard.get(resource)
        want = asked.of(resource)
        if hard is not None and want > 0 and used.of(resource) + want > hard:
            found.append(Breach(quota, resource, used.of(resource), want, hard))
    return found


def describe(found: Iterable[Breach]) -> str:
    """One sentence for an event or a log: every breach, separated by semicolons."""
    return "; ".join(str(breach) for breach in found)


def total_use(quota: Quota, uses: Iterable[ClaimUse]) -> tuple[Amounts, int]:
    """Return what ``uses`` take of ``quota`` and how many claims take anything of it."""
    total, claims = Amounts(), 0
    for use in uses:
        taken = use.counted_by(quota)
        if not taken.is_zero():
            total += taken
            claims += 1
    return total, claims


def cluster_uses(
    claims: Iterable[ObjectView], slices: Iterable[ObjectView], names: DriverNames
) -> list[ClaimUse]:
    """Return what each allocated claim takes, as readers outside the allocator count it.

    The cards' memory comes from the slices (each pool's newest generation); config-sized
    shares on whole-only cards count as the shares they stand for, as the allocator counts
    them.
    """
    capacities = slice_capacities(slices, names.driver)

    def card_memory(pool: str, device: str) -> Fraction | None:
        found = capacities.get((names.driver, pool, device))
        memory = found.get(MEMORY) if found is not None else None
        return memory.value if memory is not None else None

    uses = []
    for claim in counted_claims([dict(c) for c in claims], names, capacities):
        use = claim_use(claim, names, card_memory)
        if use is not None:
            uses.append(use)
    return uses


def outside_controller(claims: Iterable[ObjectView], quota: Quota) -> list[str]:
    """Return the names of ``quota``'s namespace's claims kube-scheduler allocated, sorted."""
    return sorted(
        objects.name(claim)
        for claim in claims
        if objects.namespace(claim) == quota.namespace
        and objects.status(claim).get("allocation")
        and allocated_by_scheduler(claim)
    )
