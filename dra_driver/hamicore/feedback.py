"""The host monitor's decisions: who is suspended, who may burst. Pure: states in, actions out.

``libvgpu.so`` only records a task's priority and marks its kernel launches
(``recent_kernel > 0``); a process on the host must act on them, every period, over every
region on the node, card by card (the rules of HAMi's own monitor):

1. A region with ``recent_kernel > 0`` is decremented; if it is still above 0, its task counts
   as *active* at its priority on each of its cards. So does a task on any card for which its
   processes reported SM utilisation in the library's last sample: from HAMi-core 2.8 on, a
   task that is not rate-limited (a whole card's cores, policy ``disable``, or a burst the
   monitor allowed) no longer marks its launches, yet is just as busy.
2. A region with a card on which a task of strictly higher priority (a smaller number) is
   active is *suspended* (``recent_kernel = -1``: the library holds its kernel launches);
   otherwise a suspended one is resumed (``recent_kernel = 0``).
3. A region with a card on which a task of higher priority, or more than one task of its own
   priority (itself included), is active has its SM limit enforced
   (``utilization_switch = 1``); otherwise the switch is 0 and a task under policy
   ``default`` (``burst-share``) may use the idle card.

Every card of a region counts (HAMi's monitor looks only at the first card it finds active),
so a claim spanning cards is suspended when any of its cards is wanted by a more important
task. Memory is never touched: a suspended task keeps everything it allocated.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

SUSPENDED = -1
"""``recent_kernel`` while the library holds the task's kernel launches."""
ENFORCED = 1
"""``utilization_switch`` while the SM limit applies (the library's own starting value)."""


@dataclasses.dataclass(frozen=True)
class RegionState:
    """What the monitor reads from one region."""

    key: str
    uuids: tuple[str, ...]
    priority: int
    recent_kernel: int
    utilization_switch: int
    busy: frozenset[str] = frozenset()
    """Cards whose SM utilisation the region's processes last reported above 0."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """What one region's two fields become, and why (for logs and metrics)."""

    key: str
    recent_kernel: int
    utilization_switch: int
    active: bool
    """The task launched kernels lately (after this period's decrement)."""
    suspended_by: int | None
    """The priority of the busier, more important task it waits for; ``None``: it runs."""

    @property
    def suspended(self) -> bool:
        """Whether the task's kernel launches are held."""
        return self.recent_kernel == SUSPENDED


def decide(states: Sequence[RegionState]) -> list[Decision]:
    """Apply the three rules once to every region; return each region's new fields."""
    decremented = {
        state.key: state.recent_kernel - 1 if state.recent_kernel > 0 else state.recent_kernel
        for state in states
    }
    busy_cards = {
        state.key: set(state.uuids) if decremented[state.key] > 0 else state.busy & set(state.uuids)
        for state in states
    }
    active: dict[str, Counter[int]] = {}
    for state in states:
        for uuid in busy_cards[state.key]:
            active.setdefault(uuid, Counter())[state.priority] += 1
    decisions = []
    for state in states:
        kernel = decremented[state.key]
        mine = bool(busy_cards[state.key])
        higher = [
            priority
            for uuid in set(state.uuids)
            for priority, count in active.get(uuid, Counter()).items()
            if priority < state.priority and count > 0
        ]
        peers = any(active.get(uuid, Counter())[state.priority] > 1 for uuid in set(state.uuids))
        if higher:
            kernel = SUSPENDED
        elif kernel < 0:
            kernel = 0
        decisions.append(
            Decision(
                key=state.key,
                recent_kernel=kernel,
                utilization_switch=ENFORCED if higher or peers else 0,
                active=mine,
                suspended_by=min(higher) if higher else None,
            )
        )
    return decisions


def released(state: RegionState) -> tuple[int, int]:
    """Return the fields a region gets when the monitor stops: resumed, limits enforced.

    Nobody will lift a suspension or end a burst once the monitor is gone: the safe state
    is the library's own starting one.
    """
    kernel = 0 if state.recent_kernel == SUSPENDED else state.recent_kernel
    return kernel, ENFORCED
