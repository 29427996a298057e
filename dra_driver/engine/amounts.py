"""Free capacities interned, and the comparisons against them remembered.

At high occupancy a failed decision compares a request with every card of many nodes, twice
(does it fit, and how close does it come), in exact fractions. Yet a cluster's cards are in
few distinct states: a card model's free capacity takes a handful of values. So
:class:`Load` keeps one dict per distinct free capacity (:class:`FreeStates`), and
:class:`Comparisons` remembers each answer by the identity of the two dicts compared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Final, TypeVar

from dra_driver.engine.scoring import free_fraction
from dra_driver.structured.consumable import Capacity

Amounts = Mapping[str, Fraction]
A = TypeVar("A")
B = TypeVar("B")
T = TypeVar("T")

_REMEMBERED: Final = 20_000
"""Comparisons kept before starting over (about 300 bytes each, so 6 MB at most). Only
interned states are compared this way, so a cluster rarely has this many pairs."""
_STATES_KEPT: Final = 50_000
"""Distinct free capacities kept for sharing before starting over (sharing is only lost)."""


def closeness(wanted: Amounts, free: Amounts) -> float:
    """How close a card comes to a share: the smallest free/wanted ratio (1 or more fits).

    Only used to name the closest card, so floating point is exact enough, and far cheaper
    than fractions when a failure is explained over thousands of cards.
    """
    ratios = [float(free.get(name, 0)) / float(need) for name, need in wanted.items() if need > 0]
    return min(ratios) if ratios else 1.0


class FreeStates:
    """Hands out one dict per distinct free capacity; the dicts must never be changed."""

    def __init__(self) -> None:
        self._known: dict[tuple[tuple[str, Fraction], ...], dict[str, Fraction]] = {}

    def intern(self, free: dict[str, Fraction]) -> dict[str, Fraction]:
        """Return the dict equal to ``free`` that was handed out first (while kept)."""
        if len(self._known) >= _STATES_KEPT:
            self._known.clear()
        return self._known.setdefault(tuple(sorted(free.items())), free)


class Comparisons:
    """Whether a share fits a card's free capacity, and how close it comes, remembered.

    Keyed by the identity of interned or otherwise long-lived dicts. Each entry holds both
    dicts, so an identity in the table is never reused by another object while it is there.
    """

    def __init__(self) -> None:
        self._fits: dict[tuple[int, int], tuple[object, object, bool]] = {}
        self._closeness: dict[tuple[int, int], tuple[object, object, float]] = {}
        self._fractions: dict[tuple[int, int], tuple[object, object, Fraction]] = {}

    def fits(self, free: Amounts, consumed: Amounts) -> bool:
        """Whether ``free`` covers ``consumed`` in every capacity it names."""
        return _recall(self._fits, free, consumed, covers)

    def closeness(self, wanted: Amounts, free: Amounts) -> float:
        """Return :func:`closeness` of the pair."""
        return _recall(self._closeness, wanted, free, closeness)

    def free_fraction(self, capacities: Mapping[str, Capacity], free: Amounts) -> Fraction:
        """Return :func:`scoring.free_fraction` of a card with these capacities."""
        return _recall(self._fractions, capacities, free, free_fraction)


def covers(free: Amounts, consumed: Amounts) -> bool:
    """Whether ``free`` capacity covers ``consumed`` in every capacity it names."""
    return all(free[name] >= amount for name, amount in consumed.items())


def _recall(
    table: dict[tuple[int, int], tuple[object, object, T]],
    first: A,
    second: B,
    compute: Callable[[A, B], T],
) -> T:
    """Return ``compute(first, second)``, remembered by the two objects' identities."""
    key = (id(first), id(second))
    found = table.get(key)
    if found is None:
        if len(table) >= _REMEMBERED:
            table.clear()
        found = table[key] = (first, second, compute(first, second))
    return found[2]
