"""The order in which a decision visits nodes: best possible first, so it can stop early.

A node's rank (:func:`scoring.node_key`) is its free fraction after placement, which is its free
fraction now less what the picks take. What a pick takes depends only on the request and the
card's model, so for each node shape the engine knows bounds on what the pod can take:
``[low, high]``. Under ``binpack`` no node can rank better than ``free now - high``; under
``spread`` none better than ``-(free now - low)``. :func:`visit_order` yields nodes ascending by
that bound (then by name, the final tie-break), so once the best solution found ranks ahead of
the next bound, no node left can beat it. Nodes with less free than ``low``, with too few
idle cards for the pod's whole-card picks, or with no card that has the least any pick needs,
cannot fit at all and are never yielded.
Over-committed nodes (the bound assumes no card below zero) come first, unpruned.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction

from dra_driver.api import Placement
from dra_driver.engine.load import Load, Shape
from dra_driver.engine.matching import Matcher
from dra_driver.engine.requests import ClaimSpec


@dataclasses.dataclass(frozen=True)
class Take:
    """Bounds on how much of a node's mean free fraction the pod's picks take."""

    low: Fraction
    high: Fraction
    idle: int
    """Unused cards the node needs at least (whole-card picks need idle cards)."""
    room: dict[str, Fraction]
    """Free capacity some one card of the node needs at least, per capacity."""


def take(shape: Shape, specs: Sequence[ClaimSpec], matcher: Matcher) -> Take | None:
    """Bound what the pod takes from a node of ``shape``; ``None`` if it can never fit one.

    Per request, the cheapest and dearest of its alternatives: ``count`` picks (1 to every
    card for ``allocationMode: All``) times the least and most one pick takes on the shape's
    models.
    """
    cards = sum(count for _, count in shape)
    low = high = Fraction(0)
    idle = 0
    room: dict[str, Fraction] = {}
    for spec in specs:
        for request in spec.requests:
            least: Fraction | None = None
            most: Fraction | None = None
            idle_needed: int | None = None
            floor: dict[str, Fraction] | None = None
            for alternative in request.alternatives:
                deltas = [
                    delta
                    for model, _ in shape
                    if (delta := matcher.delta(alternative, model)) is not None
                ]
                if not deltas:
                    continue
                fewest, most_picks = (
                    (1, cards) if alternative.all_devices else (alternative.count,) * 2
                )
                if most_picks > cards:
                    continue  # more cards than the node has
                cheap, dear = fewest * min(deltas), most_picks * max(deltas)
                least = cheap if least is None else min(least, cheap)
                most = dear if most is None else max(most, dear)
                whole = all(matcher.takes_whole(alternative, model) for model, _ in shape)
                needed = fewest if whole else 0
                idle_needed = needed if idle_needed is None else min(idle_needed, needed)
                for model, _ in shape:
                    floor = _least(floor, matcher.needs(alternative, model))
            if least is None or most is None or idle_needed is None or floor is None:
                return None
            low += least
            high += most
            idle = max(idle, idle_needed)
            # Every request needs some card with its floor free, so the node needs the most.
            room = {name: max(room.get(name, amount), amount) for name, amount in floor.items()}
    return Take(low / cards, high / cards, idle, room)


def _least(
    floor: dict[str, Fraction] | None, needs: dict[str, Fraction] | None
) -> dict[str, Fraction] | None:
    """Lower ``floor`` to what ``needs`` asks (a capacity it does not name needs nothing)."""
    if needs is None:
        return floor
    if floor is None:
        return {name: amount for name, amount in needs.items() if amount > 0}
    return {
        name: min(amount, needs[name]) for name, amount in floor.items() if needs.get(name, 0) > 0
    }


def visit_order(
    load: Load,
    specs: Sequence[ClaimSpec],
    matcher: Matcher,
    placement: Placement,
    ruled_out: Callable[[str], bool],
) -> Iterator[tuple[Fraction | None, str]]:
    """Yield ``(bound, node)``: the best rank each node could reach, ascending.

    The bound is ``None`` for over-committed nodes, yielded first. Nodes the pod can never fit
    (by shape, free fraction or summary, or ``ruled_out`` by what the caller already knows)
    are not yielded.
    """
    for node in sorted(load.overcommitted):
        yield None, node
    streams = []
    for shape in load.shapes:
        bounds = take(shape, specs, matcher)
        if bounds is not None:
            streams.append(_stream(load, shape, bounds, placement, ruled_out))
    yield from heapq.merge(*streams)


def _stream(
    load: Load,
    shape: Shape,
    bounds: Take,
    placement: Placement,
    ruled_out: Callable[[str], bool],
) -> Iterator[tuple[Fraction, str]]:
    """One shape's nodes that could fit, with their bounds, ascending."""
    if placement is Placement.BINPACK:
        ascending = load.ascending(shape)
        start = bisect.bisect_left(ascending, bounds.low, key=lambda item: item[0])
        for free, node in itertools.islice(ascending, start, None):
            if _may_fit(load, node, bounds) and not ruled_out(node):
                yield free - bounds.high, node
    else:
        descending = load.descending(shape)
        end = bisect.bisect_right(descending, -bounds.low, key=lambda item: item[0])
        for minus_free, node in itertools.islice(descending, end):
            if _may_fit(load, node, bounds) and not ruled_out(node):
                yield bounds.low + minus_free, node


def _may_fit(load: Load, node: str, bounds: Take) -> bool:
    if load.idle[node] < bounds.idle:
        return False
    room = load.room[node]
    return all(room.get(name, 0) >= amount for name, amount in bounds.room.items())
