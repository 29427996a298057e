"""Capacity requests against the request policy our ResourceSlices publish, and the cluster's cards.

The kubelet plugin publishes every card with ``cores`` (100, ``validRange {0..100 step 1}``)
and ``memory`` (the card's bytes on a 1Mi grid, ``validRange {min 1Mi, step 1Mi}``); see
``dra_driver/publishing/slices.py``, which a test compares with these constants. A request
the policy would round into something else, or that no published card could ever hold, is
refused here with the allowed values instead of leaving the pod Pending. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from dra_driver.api import DriverNames
from dra_driver.api.errors import Reason, quote
from dra_driver.api.fields import CORES, MAX_CORES, MEMORY, MIB
from dra_driver.k8s import objects
from dra_driver.k8s.quantity import (
    QuantityError,
    QuantityFormat,
    QuantityRangeError,
    format_quantity,
    parse_quantity,
)

MEMORY_STEP: Final = MIB


@dataclass(frozen=True)
class Limits:
    """What the cluster's published cards allow; ``None`` where no card is known.

    ``largest_memory`` is the memory capacity (bytes) of the largest card, ``most_cards`` the
    most cards one node (pool) has.
    """

    largest_memory: int | None = None
    most_cards: int | None = None
    shareable: bool | None = None
    """Whether the cards are published shareable; ``False`` when every card is a plain device
    (the API server has no consumable capacity), ``None`` when no card is known."""


def limits_from_slices(slices: Iterable[Mapping[str, Any]]) -> Limits:
    """Return the limits of our ResourceSlices, counting only each pool's newest generation."""
    pools: dict[str, tuple[int, list[Mapping[str, Any]]]] = {}
    for resource_slice in slices:
        spec = objects.spec(resource_slice)
        pool = spec.get("pool") or {}
        name, generation = str(pool.get("name") or ""), int(pool.get("generation") or 0)
        devices = list(spec.get("devices") or [])
        known = pools.get(name)
        if known is None or generation > known[0]:
            pools[name] = (generation, devices)
        elif generation == known[0]:
            known[1].extend(devices)
    largest = 0
    shareable: bool | None = None
    for _, devices in pools.values():
        for device in devices:
            shareable = bool(shareable) or device.get("allowMultipleAllocations") is True
            value = ((device.get("capacity") or {}).get(MEMORY) or {}).get("value")
            try:
                largest = max(largest, int(parse_quantity(str(value))))
            except QuantityError:
                continue  # not one of our cards; the API server keeps ours well-formed
    most = max((len(devices) for _, devices in pools.values()), default=0)
    # Pools without a single card say nothing about what a card could hold.
    return Limits(largest_memory=largest or None, most_cards=most or None, shareable=shareable)


def invalid(field: str, shown: str, rule: str) -> str:
    """Word a field error as the API server does: ``<field>: Invalid value: <value>: <rule>``."""
    return f"{field}: {Reason.INVALID_VALUE}: {shown}: {rule}"


def check_capacity(
    entry: Mapping[str, Any], where: str, names: DriverNames, limits: Limits
) -> tuple[dict[str, Fraction], list[str]]:
    """Return the entry's valid capacity requests by name, and an error for each other one."""
    amounts: dict[str, Fraction] = {}
    errors: list[str] = []
    for name, value in ((entry.get("capacity") or {}).get("requests") or {}).items():
        field, text = f"{where}.capacity.requests[{name}]", str(value)
        if name not in (CORES, MEMORY):
            errors.append(
                f"{field}: {Reason.UNSUPPORTED_VALUE}: {quote(str(name))}: supported values: "
                f"{quote(CORES)}, {quote(MEMORY)}"
            )
            continue
        try:
            amount = parse_quantity(text)
        except QuantityRangeError as exc:
            errors.append(invalid(field, quote(text), exc.problem))
            continue
        except QuantityError:
            errors.append(invalid(field, quote(text), "must be a quantity such as 30 or 5Gi"))
            continue
        problem = (
            _cores_problem(amount) if name == CORES else _memory_problem(amount, names, limits)
        )
        if problem is None:
            amounts[name] = amount
        else:
            errors.append(invalid(field, quote(text), problem))
    return amounts, errors


def _cores_problem(amount: Fraction) -> str | None:
    if amount.denominator == 1 and 0 <= amount <= MAX_CORES:
        return None
    return f"must be a whole number from 0 to {MAX_CORES} (percent of the card's SMs)"


def _memory_problem(amount: Fraction, names: DriverNames, limits: Limits) -> str | None:
    if amount < MEMORY_STEP:
        return (
            "must be at least 1Mi; memory is handed out in whole MiB, and other amounts are "
            "rounded up to the next MiB"
        )
    return over_largest_card(-(-amount // MEMORY_STEP) * MEMORY_STEP, names, limits)


def over_largest_card(memory: int, names: DriverNames, limits: Limits) -> str | None:
    """Return why ``memory`` bytes (on the MiB grid) fit no card of the cluster, or ``None``."""
    # No slice known (a new cluster, or the plugin not running yet): nothing to compare with,
    # and refusing every claim until the first node reports would help no one.
    largest = limits.largest_memory
    if largest is None or memory <= largest:
        return None
    return (
        f"must be at most {format_quantity(largest, QuantityFormat.BINARY)}, the memory of the "
        f"largest {names.driver} card in the cluster"
    )
