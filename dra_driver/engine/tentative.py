"""The picks one node search has made so far, and what they take from each card.

A search pushes a pick when it tries a card for a request and pops it when it backtracks;
free capacity, the free fraction and "in use" are then the snapshot's, less these picks. An
admin-access pick takes nothing: the card is seen, not shared out.
"""

from __future__ import annotations

from fractions import Fraction

from dra_driver.api import Priority
from dra_driver.engine import scoring
from dra_driver.engine.devices import Device
from dra_driver.engine.matching import Pick
from dra_driver.engine.snapshot import Snapshot
from dra_driver.structured.allocated import DeviceId


class Tentative:
    """Picks in search order, with their amounts per card."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self.picks: list[Pick] = []
        self._amounts: dict[DeviceId, dict[str, Fraction]] = {}
        self._whole: set[DeviceId] = set()
        self._shares: dict[DeviceId, int] = {}
        self._online: dict[DeviceId, int] = {}

    def push(self, pick: Pick) -> None:
        """Take ``pick``'s amounts from its card."""
        self.picks.append(pick)
        self._count(pick, 1)

    def pop(self) -> None:
        """Undo the latest pick."""
        self._count(self.picks.pop(), -1)

    def _count(self, pick: Pick, sign: int) -> None:
        """Add (``sign`` 1) or give back (-1) what ``pick`` takes of its card."""
        device_id = pick.device.id
        if pick.alternative.admin:
            return
        if pick.consumed is None:
            if sign > 0:
                self._whole.add(device_id)
            else:
                self._whole.discard(device_id)
            return
        amounts = self._amounts.setdefault(device_id, {})
        for name, amount in pick.consumed.items():
            amounts[name] = amounts.get(name, Fraction(0)) + sign * amount
        self._shares[device_id] = self._shares.get(device_id, 0) + sign
        if pick.alternative.config.priority is Priority.ONLINE:
            self._online[device_id] = self._online.get(device_id, 0) + sign

    def touched(self, device: Device) -> bool:
        """Whether a pick (not admin access) takes from the card."""
        return bool(self._amounts.get(device.id)) or device.id in self._whole

    def free(self, device: Device) -> dict[str, Fraction] | None:
        """Free capacity now, these picks included; ``None`` if used whole. Read only."""
        if device.id in self._whole:
            return None
        free = self._snapshot.load.free[device.id]
        amounts = self._amounts.get(device.id)
        if free is None or not amounts:
            return free
        return {name: value - amounts.get(name, Fraction(0)) for name, value in free.items()}

    def fraction(self, device: Device) -> Fraction:
        """Return the free fraction now, these picks included (see :mod:`scoring`)."""
        if device.id in self._whole:
            return Fraction(0)
        if not self._amounts.get(device.id):
            return self._snapshot.load.fraction[device.id]
        free = self.free(device)
        return Fraction(0) if free is None else scoring.free_fraction(device.capacities, free)

    def in_use(self, device: Device) -> bool:
        """Whether anyone (these picks included) uses the card."""
        return (
            self._snapshot.state.in_use(device.id)
            or device.id in self._whole
            or self._shares.get(device.id, 0) > 0
        )

    def hosts_online(self, device: Device) -> bool:
        """Whether an online share is on the card, counting these picks."""
        counts = self._snapshot.priorities.get(device.id, {})
        return counts.get(Priority.ONLINE, 0) + self._online.get(device.id, 0) > 0

    def listed(self, claim: int, device: Device) -> bool:
        """Whether claim ``claim`` already lists the card (a claim names a card once)."""
        return any(p.claim == claim and p.device.id == device.id for p in self.picks)
