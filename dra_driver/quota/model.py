"""A GpuShareQuota object, read and checked.

``spec.hard`` names any of ``cores`` (a whole card counts 100), ``memory`` (bytes, as a
quantity) and ``cards`` (cards held whole); ``spec.priority`` (``online`` or ``offline``),
when set, limits the quota to claims of that priority. The CRD's schema refuses most bad
objects at the API server; this module checks again, because a quota written before a schema
change, or served by an API server that skipped validation, must not crash a reader: it is
reported by name and field, and left out.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Final

from dra_driver.api import Priority
from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from dra_driver.k8s.quantity import QuantityError, QuantityFormat, format_quantity, parse_quantity

CORES: Final = "cores"
MEMORY: Final = "memory"
CARDS: Final = "cards"
RESOURCES: Final = (CORES, MEMORY, CARDS)
"""What a quota may limit, in the order messages and tables list them."""

_ZERO: Final = Fraction(0)


class QuotaSpecError(ValueError):
    """A GpuShareQuota that cannot be enforced; the message names the quota and the field."""


@dataclasses.dataclass(frozen=True)
class Amounts:
    """Cores, memory (bytes) and whole cards: what is used, asked or allowed."""

    cores: Fraction = _ZERO
    memory: Fraction = _ZERO
    cards: Fraction = _ZERO

    def __add__(self, other: Amounts) -> Amounts:
        """Return the sum, resource by resource."""
        return Amounts(
            self.cores + other.cores, self.memory + other.memory, self.cards + other.cards
        )

    def of(self, resource: str) -> Fraction:
        """Return the amount of ``resource`` (one of :data:`RESOURCES`)."""
        return Fraction(getattr(self, resource))

    def is_zero(self) -> bool:
        """Whether nothing is counted."""
        return not (self.cores or self.memory or self.cards)


@dataclasses.dataclass(frozen=True)
class Quota:
    """One GpuShareQuota: where it applies, what it allows, which claims it counts."""

    namespace: str
    name: str
    hard: dict[str, Fraction]
    """Only the resources the quota limits (a subset of :data:`RESOURCES`, never empty)."""
    priority: Priority | None = None
    """Count only claims of this priority; ``None``: every claim."""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def counts(self, priority: Priority) -> bool:
        """Whether a share of ``priority`` counts against this quota."""
        return self.priority is None or self.priority is priority


def render_amount(resource: str, value: Fraction) -> str:
    """Write an amount as the quota's status does: memory ``10Gi``, cores ``70``, cards ``1``."""
    if resource == MEMORY:
        return format_quantity(value, QuantityFormat.BINARY)
    return format_quantity(value)


def parse_quota(obj: ObjectView) -> Quota:
    """Return the quota ``obj`` describes; :class:`QuotaSpecError` naming the field if none."""
    namespace, name = objects.namespace(obj), objects.name(obj)
    where = f"GpuShareQuota {namespace}/{name}"
    spec = objects.spec(obj)
    hard_field = spec.get("hard")
    if not isinstance(hard_field, dict) or not hard_field:
        raise QuotaSpecError(f"{where}: spec.hard must name at least one of {', '.join(RESOURCES)}")
    hard: dict[str, Fraction] = {}
    for resource, value in hard_field.items():
        if resource not in RESOURCES:
            raise QuotaSpecError(
                f"{where}: spec.hard.{resource} is not a resource this driver counts; "
                f"allowed: {', '.join(RESOURCES)}"
            )
        hard[resource] = _amount(where, resource, value)
    priority = spec.get("priority")
    allowed = [str(p) for p in Priority]
    if priority is not None and priority not in allowed:
        raise QuotaSpecError(
            f"{where}: spec.priority is {priority!r}; allowed: {', '.join(allowed)} (or unset)"
        )
    return Quota(
        namespace,
        name,
        {r: hard[r] for r in RESOURCES if r in hard},
        Priority(priority) if priority is not None else None,
    )


def _amount(where: str, resource: str, value: object) -> Fraction:
    field = f"spec.hard.{resource}"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise QuotaSpecError(f'{where}: {field} must be a quantity (e.g. "100", "40Gi")')
    try:
        amount = parse_quantity(str(value))
    except QuantityError as exc:
        raise QuotaSpecError(f"{where}: {field}: {exc}") from None
    if amount < 0:
        raise QuotaSpecError(f"{where}: {field} must not be negative, is {value}")
    if resource in (CORES, CARDS) and amount.denominator != 1:
        raise QuotaSpecError(f"{where}: {field} must be a whole number, is {value}")
    return amount


@dataclasses.dataclass(frozen=True)
class QuotaStanding:
    """One quota: what it allows, what its namespace's claims hold, who waits on it."""

    quota: Quota
    used: Amounts
    claims: int
    """How many allocated (or planned) claims take something of it."""
    waiting: tuple[str, ...]
    """``namespace/name`` of each pod it holds back (or would)."""

    @property
    def exceeded(self) -> tuple[str, ...]:
        """The resources whose use is over ``hard`` (claims the controller could not hold)."""
        return tuple(r for r, hard in self.quota.hard.items() if self.used.of(r) > hard)

    def cells(self) -> str:
        """``cores 100/100, memory 10Gi/10Gi``: used of hard, per limited resource."""
        return ", ".join(
            f"{resource} {render_amount(resource, self.used.of(resource))}/"
            f"{render_amount(resource, hard)}"
            for resource, hard in self.quota.hard.items()
        )

    def document(self) -> dict[str, object]:
        """Return the quota and its use as ``status -o json`` and ``plan -o json`` list it."""
        quota = self.quota
        return {
            "namespace": quota.namespace,
            "name": quota.name,
            "priority": str(quota.priority) if quota.priority is not None else None,
            "limits": {
                resource: {
                    "used": render_amount(resource, self.used.of(resource)),
                    "hard": render_amount(resource, hard),
                }
                for resource, hard in quota.hard.items()
            },
            "claims": self.claims,
            "waiting": list(self.waiting),
        }
