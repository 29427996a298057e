"""Consumable-capacity arithmetic: what one share of a device consumes, as the scheduler counts.

Mirrors ``calculateConsumedCapacity``, ``roundUpRange``, ``roundUpValidValues`` and
``violatesPolicy`` of k8s.io/dynamic-resource-allocation
``structured/internal/incubating/consumable_capacity.go``: per capacity, no request and no
policy consumes the whole value, no request with a policy its ``default``, a request with a
``validRange`` is rounded up to ``min + n * step`` (to ``min`` when below it) and one with
``validValues`` to the first value not below it; an amount over ``max``, off the step or
naming a capacity the device lacks is refused. Whether the share
still fits next to the shares already allocated is the allocated state's question
(:meth:`dra_driver.structured.allocated.AllocatedState.fits`), as it is in the scheduler, where
``CmpRequestOverCapacity`` adds the two halves together.

Arithmetic is exact (:class:`~fractions.Fraction`). The scheduler before 1.37 rounds validRange
requests with ``Quantity.Value()``, i.e. each of request, min and step rounded up to an integer
first; 1.37's ``DRAFractionalCapacityRange`` uses milli-units instead. Both agree with exact
arithmetic for whole-unit quantities, which are the only ones our webhook admits, so the
difference is confined to fractional quantities (noted where it arises).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dra_driver.k8s.quantity import (
    QuantityFormat,
    format_quantity,
    parse_quantity,
    quantity_format,
)


@dataclass(frozen=True)
class CapacityPolicy:
    """A capacity's ``requestPolicy``: a default plus either valid values or a valid range.

    ``min`` is set exactly when the slice has a ``validRange`` (the API requires min there);
    ``max`` and ``step`` are optional parts of that range.
    """

    default: Fraction | None
    valid_values: tuple[Fraction, ...] | None
    min: Fraction | None
    max: Fraction | None
    step: Fraction | None


@dataclass(frozen=True)
class Capacity:
    """One entry of a device's ``capacity`` map, with the value's text to write results alike."""

    value: Fraction
    policy: CapacityPolicy | None
    text: str


class CapacityRejected(Exception):  # noqa: N818 - an allocation outcome, not a program error
    """The request does not fit the device's capacity policy; the message says why."""


def parse_capacities(device: Mapping[str, Any]) -> dict[str, Capacity]:
    """Read a raw ResourceSlice v1 device's ``capacity`` map.

    Raises :class:`ValueError` naming the capacity when a quantity is malformed or a
    ``validRange`` lacks ``min`` or has a non-positive ``step`` (the API server refuses both).
    """
    capacities: dict[str, Capacity] = {}
    for name, entry in (device.get("capacity") or {}).items():
        try:
            text = str(entry["value"])
            capacities[name] = Capacity(
                parse_quantity(text), _parse_policy(entry.get("requestPolicy")), text
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"capacity {name!r}: {_reason(exc)}") from exc
    return capacities


def _reason(exc: Exception) -> str:
    return f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)


def _optional(raw: Mapping[str, Any], key: str) -> Fraction | None:
    value = raw.get(key)
    return None if value is None else parse_quantity(str(value))


def _parse_policy(raw: Mapping[str, Any] | None) -> CapacityPolicy | None:
    if raw is None:
        return None
    # An empty list counts as absent, as in the scheduler (``len(ValidValues) > 0``).
    values = raw.get("validValues") or None
    valid_values = None if values is None else tuple(parse_quantity(str(v)) for v in values)
    limits = raw.get("validRange")
    minimum = maximum = step = None
    if limits is not None:
        minimum = _optional(limits, "min")
        if minimum is None:
            raise ValueError("requestPolicy.validRange needs min")
        maximum, step = _optional(limits, "max"), _optional(limits, "step")
        if step is not None and step <= 0:
            raise ValueError(f"requestPolicy.validRange.step must be positive, not {step}")
    return CapacityPolicy(_optional(raw, "default"), valid_values, minimum, maximum, step)


def consumed_capacity(
    capacities: Mapping[str, Capacity], requests: Mapping[str, Fraction]
) -> dict[str, Fraction]:
    """Return what one share consumes of every capacity of the device (zeros included).

    Raises :class:`CapacityRejected` when a request names a capacity the device lacks, or a
    rounded request is above the range's max or above every valid value: the scheduler skips
    such a device (``requestsContainNonExistCapacity`` and ``violatesPolicy``).
    """
    missing = sorted(name for name in requests if name not in capacities)
    if missing:
        raise CapacityRejected(f'device has no capacity "{missing[0]}"')
    consumed: dict[str, Fraction] = {}
    for name, capacity in capacities.items():
        requested = requests.get(name)
        if requested is None:
            # fillEmptyRequest. The scheduler's policy check exempts a value equal to the
            # default, and API validation keeps the default valid anyway, so none is done.
            policy = capacity.policy
            default = policy.default if policy is not None else None
            consumed[name] = capacity.value if default is None else default
        else:
            consumed[name] = _round_up(name, capacity, requested)
    return consumed


def check_within(capacities: Mapping[str, Capacity], consumed: Mapping[str, Fraction]) -> None:
    """Raise :class:`CapacityRejected` when one share would take more than the device has.

    The scheduler skips such a device whether or not it may be shared; a device that may
    not be shared would otherwise be handed out whole to a request it cannot serve.
    """
    for name, amount in sorted(consumed.items()):
        capacity = capacities[name]
        if amount > capacity.value:
            raise CapacityRejected(
                f"request {name} {_text(capacity, amount)} exceeds the device's {capacity.text}"
            )


def _round_up(name: str, capacity: Capacity, requested: Fraction) -> Fraction:
    """Apply the request policy to one requested amount, or reject it."""
    policy = capacity.policy
    if policy is None:
        return requested
    if policy.min is not None:
        amount = _round_up_range(requested, policy.min, policy.step)
        if policy.max is not None and amount > policy.max:
            rounded = "" if amount == requested else f", rounded up to {_text(capacity, amount)},"
            raise CapacityRejected(
                f"request {name} {_text(capacity, requested)}{rounded} exceeds max "
                f"{_text(capacity, policy.max)}"
            )
        return amount
    if policy.valid_values is not None:
        for value in policy.valid_values:
            if requested <= value:
                return value
        raise CapacityRejected(
            f"request {name} {_text(capacity, requested)} exceeds the largest valid value "
            f"{_text(capacity, policy.valid_values[-1])}"
        )
    return requested


def _round_up_range(requested: Fraction, minimum: Fraction, step: Fraction | None) -> Fraction:
    """Round up to ``min + n*step``; below min gives min; without a step any value >= min stays.

    The scheduler (< 1.37, or with whole-unit min and step) computes this on
    ``Quantity.Value()``, i.e. ceil(request), ceil(min) and ceil(step), so for a fractional
    request such as 10.5 with min 0, step 1 both give 11, but a fractional min or step (0.5)
    would be rounded to 1 there and kept exact here. 1.37's milli-unit path equals ours for
    quantities representable in milli-units.
    """
    if requested < minimum:
        return minimum
    if step is None:
        return requested
    steps = -((minimum - requested) // step)  # ceil((requested - min) / step), exactly
    return minimum + steps * step


def _text(capacity: Capacity, amount: Fraction) -> str:
    return format_quantity(amount, quantity_format(capacity.text))


def format_consumed(
    capacities: Mapping[str, Capacity], consumed: Mapping[str, Fraction]
) -> dict[str, str]:
    """Write consumed amounts as ``consumedCapacity`` quantity strings.

    Each is written in the format (binary or decimal SI) of the capacity's value, so a 16Gi card
    shows ``5Gi`` consumed. The scheduler's string may use another format for the same amount
    (a rounded value is written in the step's format, BinarySI before 1.37); only the quantity
    matters to every reader, which parses it.
    """
    formats = {name: quantity_format(capacity.text) for name, capacity in capacities.items()}
    return {
        name: format_quantity(amount, formats.get(name, QuantityFormat.DECIMAL))
        for name, amount in consumed.items()
    }
