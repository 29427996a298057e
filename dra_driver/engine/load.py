"""How full each card and node is, kept up to date claim by claim, and nodes ordered by it.

A decision must not look at every node of a large cluster. :class:`Load` keeps, per device,
its free capacity and free fraction (exact, as :mod:`scoring` defines it), per node the mean
of those, and per node *shape* (how many cards of which model) the nodes sorted by that mean.
:mod:`order` walks these lists best first and stops as soon as no node left can beat the best
found. Updating costs the devices a claim touches, never the cluster.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction

from dra_driver.engine.amounts import Comparisons, FreeStates
from dra_driver.structured.allocated import AllocatedState, DeviceId
from dra_driver.structured.consumable import Capacity


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """Devices that are interchangeable for capacity: shareable or not, and their capacities.

    Interned by :class:`Models`, so equal models are one object and compare by identity:
    the engine's memo tables are keyed by model on every device it looks at.
    """

    shareable: bool
    capacities: Mapping[str, Capacity]
    plain: bool = False
    """Whole-only as published, shared by config sizes (see ``Device.plain``)."""

    def shares(self, sized: bool) -> bool:
        """Whether a pick on such a card is a share (``sized``: the config gives its size)."""
        return self.shareable or (self.plain and sized)


class Models:
    """Hands out one :class:`Model` per distinct kind of device."""

    def __init__(self) -> None:
        self._known: dict[tuple[object, ...], Model] = {}

    def get(
        self, shareable: bool, capacities: Mapping[str, Capacity], *, plain: bool = False
    ) -> Model:
        """Return the model of a device with these properties."""
        key = (shareable, plain, tuple(sorted(capacities.items())))
        model = self._known.get(key)
        if model is None:
            model = self._known[key] = Model(shareable, dict(capacities), plain)
        return model


Shape = frozenset[tuple[Model, int]]
"""A node's devices as a multiset of models."""


class Load:
    """Free capacity per device and free fraction per node, indexed for ordered scans.

    ``devices`` maps each node to its devices as ``(id, capacities, model)``. Call
    :meth:`refresh` with the IDs whose allocations changed; everything else is derived.
    """

    def __init__(
        self,
        state: AllocatedState,
        devices: Mapping[str, Iterable[tuple[DeviceId, Mapping[str, Capacity], Model]]],
    ) -> None:
        self._state = state
        self._capacities: dict[DeviceId, Mapping[str, Capacity]] = {}
        self._node_of: dict[DeviceId, str] = {}
        self._members: dict[str, tuple[DeviceId, ...]] = {}
        self.shape_of: dict[str, Shape] = {}
        self.free_states = FreeStates()
        self.comparisons = Comparisons()
        """Requests against :attr:`free` capacities, remembered for the snapshot's life."""
        self.free: dict[DeviceId, dict[str, Fraction] | None] = {}
        """Free capacity of each device (interned: never change one); ``None`` when used whole."""
        self.fraction: dict[DeviceId, Fraction] = {}
        """Free fraction of each device (0 when used whole; below 0 when over-committed)."""
        self.node_fraction: dict[str, Fraction] = {}
        self.version: dict[str, int] = {}
        """Moves on whenever a node's load changes: what was learnt about it before is stale."""
        self.idle: dict[str, int] = {}
        """How many of each node's devices nothing uses (a whole-card pick needs one)."""
        self.room: dict[str, dict[str, Fraction]] = {}
        """The most free of each capacity on any one of the node's devices not used whole."""
        self.overcommitted: set[str] = set()
        """Nodes with a device below 0: the scan's pruning assumes none, so they are apart."""
        self._ascending: dict[Shape, list[tuple[Fraction, str]]] = {}
        self._descending: dict[Shape, list[tuple[Fraction, str]]] = {}
        for node, members in devices.items():
            listed = list(members)
            counts: dict[Model, int] = {}
            for device_id, capacities, model in listed:
                self._capacities[device_id] = capacities
                self._node_of[device_id] = node
                self._device(device_id)
                counts[model] = counts.get(model, 0) + 1
            self._members[node] = tuple(device_id for device_id, _, _ in listed)
            shape = frozenset(counts.items())
            self.shape_of[node] = shape
            self._ascending.setdefault(shape, [])
            self._descending.setdefault(shape, [])
            self._insert(node)

    @property
    def shapes(self) -> Iterator[Shape]:
        """Every node shape of the cluster."""
        return iter(self._ascending)

    def ascending(self, shape: Shape) -> list[tuple[Fraction, str]]:
        """``(free fraction, node)`` of the shape's nodes, emptiest last; read only."""
        return self._ascending[shape]

    def descending(self, shape: Shape) -> list[tuple[Fraction, str]]:
        """``(-free fraction, node)`` of the shape's nodes, emptiest first; read only."""
        return self._descending[shape]

    def refresh(self, device_ids: Iterable[DeviceId]) -> None:
        """Recompute the given devices (unknown IDs are ignored) and their nodes."""
        touched: dict[str, set[DeviceId]] = {}
        for device_id in device_ids:
            if device_id in self._capacities:
                touched.setdefault(self._node_of[device_id], set()).add(device_id)
        for node, members in touched.items():
            self._remove(node)
            for device_id in members:
                self._device(device_id)
            self._insert(node)

    def _device(self, device_id: DeviceId) -> None:
        capacities = self._capacities[device_id]
        if device_id in self._state.exclusive:
            self.free[device_id] = None
            self.fraction[device_id] = Fraction(0)
            return
        free = self.free_states.intern(self._state.free(device_id, capacities))
        self.free[device_id] = free
        self.fraction[device_id] = self.comparisons.free_fraction(capacities, free)

    def _insert(self, node: str) -> None:
        members = self._members[node]
        self.version[node] = self.version.get(node, 0) + 1
        self.idle[node] = sum(not self._state.in_use(device_id) for device_id in members)
        room: dict[str, Fraction] = {}
        for device_id in members:
            for name, amount in (self.free[device_id] or {}).items():
                if name not in room or amount > room[name]:
                    room[name] = amount
        self.room[node] = room
        fractions = [self.fraction[device_id] for device_id in members]
        mean = sum(fractions, Fraction(0)) / len(members)
        self.node_fraction[node] = mean
        if any(fraction < 0 for fraction in fractions):
            self.overcommitted.add(node)
            return
        shape = self.shape_of[node]
        bisect.insort(self._ascending[shape], (mean, node))
        bisect.insort(self._descending[shape], (-mean, node))

    def _remove(self, node: str) -> None:
        if node in self.overcommitted:
            self.overcommitted.discard(node)
            return
        mean = self.node_fraction[node]
        shape = self.shape_of[node]
        del self._ascending[shape][bisect.bisect_left(self._ascending[shape], (mean, node))]
        del self._descending[shape][bisect.bisect_left(self._descending[shape], (-mean, node))]
