"""The order in which a decision visits nodes: best possible first, so it can stop early.

A node's rank (:func:`scoring.node_key`) is its free fraction after placement, which is its free
fraction now less what the picks take. What a pick takes depends only on the request and the
card's model, so for each node shape the engine knows bounds on what the pod can take:
``[low, high]``. Under ``binpack`` no node can rank better than ``free now - high``; under
``spread`` none better than ``-(free now - low)``. :func:`visit_order` yields nodes ascending by
that bound (then by name, the final tie-break), so once the best solution found ranks ahead of
the next bound, no node left can beat it. Nodes with less free than ``low``, or with too few
idle cards for the pod's whole-card picks, cannot fit at all and are never yielded.
Over-committed nodes (the bound assumes no card below zero) come first, unpruned.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
from collections.abc import Iterator, Sequence
from fractions import Fraction

from dra_driver.api import Placement
from dra_driver.controller.engine.load import Load, Shape
from dra_driver.controller.engine.matching import Matcher
from dra_driver.controller.engine.requests import ClaimSpec


@dataclasses.dataclass(frozen=True)
class Take:
    """Bounds on how much of a node's mean free fraction the pod's picks take."""

    low: Fraction
    high: Fraction
    idle: int
    """Unused cards the node needs at least (whole-card picks need idle cards)."""


def take(shape: Shape, specs: Sequence[ClaimSpec], matcher: Matcher) -> Take | None:
    """Bound what the pod takes from a node of ``shape``; ``None`` if it can never fit one.

    Per request, the cheapest and dearest of its alternatives: ``count`` picks (1 to every
    card for ``allocationMode: All``) times the least and most one pick takes on the shape's
    models.
    """
    cards = sum(count for _, count in shape)
    low = high = Fraction(0)
    idle = 0
    for spec in specs:
        for request in spec.requests:
            least: Fraction | None = None
            most: Fraction | None = None
            idle_needed: int | None = None
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
            if least is None or most is None or idle_needed is None:
                return None
            low += least
            high += most
            idle = max(idle, idle_needed)
    return Take(low / cards, high / cards, idle)


def visit_order(
    load: Load, specs: Sequence[ClaimSpec], matcher: Matcher, placement: Placement
) -> Iterator[tuple[Fraction | None, str]]:
    """Yield ``(bound, node)``: the best rank each node could reach, ascending.

    The bound is ``None`` for over-committed nodes, yielded first. Nodes the pod can never fit
    (by shape or by free fraction) are not yielded.
    """
    for node in sorted(load.overcommitted):
        yield None, node
    streams = []
    for shape in load.shapes:
        bounds = take(shape, specs, matcher)
        if bounds is not None:
            streams.append(_stream(load, shape, bounds, placement))
    yield from heapq.merge(*streams)


def _stream(
    load: Load, shape: Shape, bounds: Take, placement: Placement
) -> Iterator[tuple[Fraction, str]]:
    """One shape's nodes that could fit, with their bounds, ascending."""
    if placement is Placement.BINPACK:
        ascending = load.ascending(shape)
        start = bisect.bisect_left(ascending, bounds.low, key=lambda item: item[0])
        for free, node in itertools.islice(ascending, start, None):
            if load.idle[node] >= bounds.idle:
                yield free - bounds.high, node
    else:
        descending = load.descending(shape)
        end = bisect.bisect_right(descending, -bounds.low, key=lambda item: item[0])
        for minus_free, node in itertools.islice(descending, end):
            if load.idle[node] >= bounds.idle:
                yield bounds.low + minus_free, node
