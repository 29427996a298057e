"""How the engine ranks cards and nodes (docs/placement.md has the worked example).

Scores are exact fractions and every ranking ends in a name, so the same snapshot always gives
the same answer.

- **Card (GPU) level**, per share: the share's placement (its config, else the controller's
  default for its priority) orders the cards by their free fraction after placement: the mean,
  over the card's capacities, of free/total. ``binpack`` takes the lowest (fill the busiest
  card that fits), ``spread`` the highest.
- **Priority**: an ``offline`` share first prefers cards that already run ``online`` work: the
  offline work harvests the compute the online work leaves idle, and online work stays spread
  over cards that are not all full of other offline work. Then its placement applies.
- **Node level**: a node's candidate solution is ranked by the firstAvailable alternatives it
  used (earlier is better, as kube-scheduler scores them), then by the node's free fraction
  after placement (``binpack``: lowest, ``spread``: highest), then by node name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction

from dra_driver.api import EffectiveConfig, Placement, Priority
from dra_driver.structured.consumable import Capacity


@dataclasses.dataclass(frozen=True)
class Policy:
    """Controller-wide placement defaults; a claim's ``placement`` overrides the card level."""

    node: Placement = Placement.BINPACK
    online: Placement = Placement.SPREAD
    offline: Placement = Placement.BINPACK

    @classmethod
    def uniform(cls, placement: Placement) -> Policy:
        """Use one placement at every level and for both priorities (``plan --policy``)."""
        return cls(node=placement, online=placement, offline=placement)

    def for_share(self, config: EffectiveConfig) -> Placement:
        """Return the card-level placement of a share with this config."""
        if config.placement is not None:
            return config.placement
        return self.online if config.priority is Priority.ONLINE else self.offline


def free_fraction(capacities: Mapping[str, Capacity], free: Mapping[str, Fraction]) -> Fraction:
    """Return the mean free share of a card's capacities (1 = idle, 0 = full)."""
    parts = [free[name] / cap.value for name, cap in capacities.items() if cap.value > 0]
    return sum(parts, Fraction(0)) / len(parts) if parts else Fraction(0)


def card_key(
    placement: Placement,
    priority: Priority,
    *,
    free_after: Fraction,
    hosts_online: bool,
    sort_key: tuple[str, str],
) -> tuple[object, ...]:
    """Return the ascending sort key of one candidate card for one share."""
    fill = free_after if placement is Placement.BINPACK else -free_after
    if priority is Priority.OFFLINE:
        return (not hosts_online, fill, sort_key)
    return (fill, sort_key)


def node_fill(placement: Placement, free_after: Fraction) -> Fraction:
    """Return the fill part of a node's key: lower is better under either placement."""
    return free_after if placement is Placement.BINPACK else -free_after


def node_key(
    placement: Placement, alternatives: tuple[int, ...], free_after: Fraction, node: str
) -> tuple[tuple[int, ...], Fraction, str]:
    """Return the ascending sort key of one node's solution."""
    return (alternatives, node_fill(placement, free_after), node)
