"""The cards this driver published, and what the allocated claims take of each.

Totals come from the ResourceSlices (the newest generation of each pool, as every allocator
reads them) and use from every allocated claim of the driver, whoever allocated it. A result
with a share ID takes its consumed capacity; one without takes the card whole, as the
controller and kube-scheduler count it, except a share sized by its config on a card published
whole-only, which is counted as the share it stands for
(:func:`dra_driver.structured.configshares.counted_claims`). Admin-access results take
nothing. Pure functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Final

from dra_driver.api import DriverNames
from dra_driver.api.fields import CORES, MEMORY
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import QuantityError, parse_quantity
from dra_driver.publishing.slices import PCI_BUS_ID_ATTRIBUTE
from dra_driver.structured.configshares import counted_claims, slice_capacities

CardKey = tuple[str, str]
"""(pool, device): how an allocation result names a card."""

_ZERO: Final = Fraction(0)


@dataclasses.dataclass(frozen=True)
class PublishedCard:
    """One card as its ResourceSlice publishes it."""

    node: str
    device: str
    uuid: str
    product: str
    pci_bus_id: str
    cores: Fraction
    memory: Fraction
    """Bytes."""
    shareable: bool = True
    """False for a plain device: its API server has no consumable capacity (whole cards only)."""
    taints: tuple[str, ...] = ()
    """The device's taints as ``key=value:Effect`` (an unhealthy card's, say)."""

    @property
    def short_uuid(self) -> str:
        """``GPU-`` and the first 8 hex digits: unique enough to tell cards apart."""
        return self.uuid[:12]


@dataclasses.dataclass(frozen=True)
class Share:
    """One allocation on a card: the claim, the pods it is reserved for, what it takes."""

    claim: str
    """``namespace/name``."""
    pods: tuple[str, ...]
    cores: Fraction
    memory: Fraction
    whole: bool
    """Allocated without a share: nothing else may use the card."""


@dataclasses.dataclass(frozen=True)
class CardUse:
    """One card and every allocation on it."""

    card: PublishedCard
    shares: tuple[Share, ...] = ()

    @property
    def whole(self) -> bool:
        """Whether a claim holds the card whole."""
        return any(share.whole for share in self.shares)

    @property
    def cores_used(self) -> Fraction:
        """Cores allocated: all of them while a claim holds the card whole."""
        if self.whole:
            return self.card.cores
        return sum((share.cores for share in self.shares), _ZERO)

    @property
    def memory_used(self) -> Fraction:
        """Bytes allocated: all of them while a claim holds the card whole."""
        if self.whole:
            return self.card.memory
        return sum((share.memory for share in self.shares), _ZERO)

    @property
    def cores_free(self) -> Fraction:
        """Cores no allocation takes (never below zero)."""
        return max(_ZERO, self.card.cores - self.cores_used)

    @property
    def memory_free(self) -> Fraction:
        """Bytes no allocation takes (never below zero)."""
        return max(_ZERO, self.card.memory - self.memory_used)


def quantity(value: object) -> Fraction | None:
    """Parse a quantity; ``None`` for none or a malformed one."""
    try:
        return None if value is None else parse_quantity(str(value))
    except QuantityError:
        return None


def _string(attributes: Mapping[str, Any], name: str) -> str:
    return str((attributes.get(name) or {}).get("string") or "")


def _taint(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def published_cards(slices: Iterable[Object], driver: str) -> dict[CardKey, PublishedCard]:
    """Return ``driver``'s cards in the newest slice generation of each pool, sorted."""
    ours = [spec for s in slices if (spec := objects.spec(s)).get("driver") == driver]
    newest: dict[str, int] = {}
    for spec in ours:
        pool = spec.get("pool") or {}
        name = str(pool.get("name") or "")
        newest[name] = max(newest.get(name, 0), int(pool.get("generation") or 0))
    cards: dict[CardKey, PublishedCard] = {}
    for spec in ours:
        pool = spec.get("pool") or {}
        name = str(pool.get("name") or "")
        if int(pool.get("generation") or 0) < newest[name]:
            continue  # being replaced by the plugin's newer generation
        for device in spec.get("devices") or []:
            attributes = device.get("attributes") or {}
            capacity = device.get("capacity") or {}
            cards[name, str(device.get("name"))] = PublishedCard(
                node=str(spec.get("nodeName") or name),
                device=str(device.get("name")),
                uuid=_string(attributes, "uuid"),
                product=_string(attributes, "productName"),
                pci_bus_id=_string(attributes, PCI_BUS_ID_ATTRIBUTE),
                cores=quantity((capacity.get(CORES) or {}).get("value")) or _ZERO,
                memory=quantity((capacity.get(MEMORY) or {}).get("value")) or _ZERO,
                shareable=device.get("allowMultipleAllocations") is True,
                taints=tuple(_taint(t) for t in device.get("taints") or []),
            )
    return dict(sorted(cards.items(), key=lambda item: (item[1].node, item[1].device)))


def card_uses(
    names: DriverNames, slices: Iterable[Object], claims: Iterable[Object]
) -> list[CardUse]:
    """Return every published card with the allocations of ``claims`` on it."""
    slices = list(slices)
    cards = published_cards(slices, names.driver)
    shares: dict[CardKey, list[Share]] = {key: [] for key in cards}
    for claim in counted_claims(claims, names, slice_capacities(slices, names.driver)):
        _add_shares(names, cards, shares, claim)
    return [CardUse(card, tuple(shares[key])) for key, card in cards.items()]


def _add_shares(
    names: DriverNames,
    cards: Mapping[CardKey, PublishedCard],
    shares: dict[CardKey, list[Share]],
    claim: Object,
) -> None:
    status = objects.status(claim)
    key = f"{objects.namespace(claim)}/{objects.name(claim)}"
    pods = tuple(sorted(str(r.get("name")) for r in status.get("reservedFor") or []))
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    for result in results:
        card_key = (str(result.get("pool")), str(result.get("device")))
        card = cards.get(card_key)
        if result.get("driver") != names.driver or card is None or result.get("adminAccess"):
            continue
        if result.get("shareID"):
            consumed = result.get("consumedCapacity") or {}
            share = Share(
                key,
                pods,
                quantity(consumed.get(CORES)) or _ZERO,
                quantity(consumed.get(MEMORY)) or _ZERO,
                whole=False,
            )
        else:
            share = Share(key, pods, card.cores, card.memory, whole=True)
        shares[card_key].append(share)
