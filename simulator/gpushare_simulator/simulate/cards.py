"""The cards the kubelet plugins published, and how much of each the allocated claims take.

Totals come from the ResourceSlices (what the node offers) and use from every allocated claim
of the driver in the cluster, whoever allocated it: a result without a share takes the card
whole, as the controller and kube-scheduler count it, except a share sized by its config on a
card published whole-only, which the caller first turns into the share it is counted as
(:func:`dra_driver.structured.configshares.counted_claims`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Final

from dra_driver.k8s.quantity import QuantityError, parse_quantity

Object = dict[str, Any]

_PCI_BUS_ID: Final = "resource.kubernetes.io/pciBusID"


@dataclasses.dataclass(frozen=True)
class Card:
    """One published card."""

    node: str
    device: str
    uuid: str
    pci_bus_id: str
    cores: Fraction
    memory: Fraction

    @property
    def short_uuid(self) -> str:
        """``GPU-`` and the first 8 hex digits: unique enough to tell cards apart."""
        return self.uuid[:12]


@dataclasses.dataclass(frozen=True)
class CardUse:
    """How full one card is."""

    card: Card
    shares: int
    whole: bool
    """Allocated without a share: nothing else may use it."""
    cores: Fraction
    memory: Fraction


def quantity(value: object) -> Fraction | None:
    """Parse a quantity; ``None`` for none or a malformed one."""
    try:
        return None if value is None else parse_quantity(str(value))
    except QuantityError:
        return None


def published_cards(slices: Iterable[Object], driver: str) -> dict[tuple[str, str], Card]:
    """Return the cards of ``driver``'s newest slice generation per pool, by (node, device)."""
    ours = [item["spec"] for item in slices if item["spec"].get("driver") == driver]
    newest: dict[str, int] = {}
    for spec in ours:
        pool = spec["pool"]
        newest[pool["name"]] = max(newest.get(pool["name"], 0), int(pool["generation"]))
    cards = {}
    for spec in ours:
        if int(spec["pool"]["generation"]) < newest[spec["pool"]["name"]]:
            continue  # being replaced by the plugin's newer generation
        for device in spec.get("devices") or []:
            attributes, capacity = device.get("attributes") or {}, device.get("capacity") or {}
            card = Card(
                node=spec["pool"]["name"],
                device=device["name"],
                uuid=str((attributes.get("uuid") or {}).get("string", "")),
                pci_bus_id=str((attributes.get(_PCI_BUS_ID) or {}).get("string", "")),
                cores=parse_quantity(str(capacity["cores"]["value"])),
                memory=parse_quantity(str(capacity["memory"]["value"])),
            )
            cards[(card.node, card.device)] = card
    return dict(sorted(cards.items()))


@dataclasses.dataclass
class _Tally:
    shares: int = 0
    whole: bool = False
    cores: Fraction = Fraction(0)
    memory: Fraction = Fraction(0)


def card_uses(
    cards: Mapping[tuple[str, str], Card], claims: Iterable[Object], driver: str
) -> list[CardUse]:
    """Return how much of each card the allocated ``claims`` take."""
    tallies = {key: _Tally() for key in cards}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            key = (result["pool"], result["device"])
            tally = tallies.get(key)
            if result.get("driver") != driver or tally is None:
                continue
            tally.shares += 1
            consumed = result.get("consumedCapacity")
            if not result.get("shareID") or not consumed:
                tally.whole = True  # a device allocated without a share is used whole
                tally.cores, tally.memory = cards[key].cores, cards[key].memory
                continue
            tally.cores += quantity(consumed.get("cores")) or 0
            tally.memory += quantity(consumed.get("memory")) or 0
    return [CardUse(cards[key], t.shares, t.whole, t.cores, t.memory) for key, t in tallies.items()]
