"""A claim's shares of its cards, summed per card and numbered as CUDA numbers the cards.

A :class:`CardShare` is one allocation result resolved to its card; :func:`card_limits` sums
the shares of a set (one request's) per card and numbers the cards by PCI bus ID, as CUDA does
inside a container that sees exactly those cards (``CUDA_DEVICE_ORDER=PCI_BUS_ID``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from dra_driver.api.errors import quote
from dra_driver.api.fields import MIB
from dra_driver.cdi.names import check_share_id
from dra_driver.nvml.card import Card
from dra_driver.nvml.fields import format_quantity

FULL_CORES: Final = 100


class UnsupportedPolicyError(ValueError):
    """The claim's policy cannot be enforced by its backend; the message says what to use."""


class InvalidShareError(UnsupportedPolicyError):
    """A share's numbers or card are impossible (out of range, inconsistent): nothing to build."""


@dataclass(frozen=True)
class CardShare:
    """One allocation result resolved to its card; a whole card is 100 cores and all memory."""

    card: Card
    cores: int
    memory_bytes: int
    share_id: str | None
    request: str


@dataclass(frozen=True)
class CardLimit:
    """The claim's total share of one card, at CUDA ordinal ``ordinal`` in the container."""

    ordinal: int
    card: Card
    cores: int
    memory_bytes: int

    @property
    def memory_mib(self) -> int:
        """The memory limit in whole MiB, rounded down so that it never exceeds the share."""
        return self.memory_bytes // MIB

    def describe(self) -> str:
        """Name the card for a message: ``card 0 (GPU-…)``."""
        return f"card {self.ordinal} ({self.card.uuid})"


def _check_share(share: CardShare) -> None:
    where = f"request {quote(share.request)}"
    card = f"card {share.card.uuid}"
    cores, memory = share.cores, share.memory_bytes
    if isinstance(cores, bool) or not isinstance(cores, int) or not 0 <= cores <= FULL_CORES:
        raise InvalidShareError(
            f"{where}: cores {cores!r} on {card}: must be between 0 and {FULL_CORES}"
        )
    total = share.card.memory_bytes
    if isinstance(memory, bool) or not isinstance(memory, int) or not MIB <= memory <= total:
        # As a claim writes it (64Gi), not as a byte count nobody typed.
        amount = format_quantity(memory) if type(memory) is int and memory > 0 else repr(memory)
        raise InvalidShareError(
            f"{where}: memory {amount} on {card}: must be at least 1Mi and at most the "
            f"card's {format_quantity(total)}"
        )
    if share.share_id is not None:
        check_share_id(share.share_id)


def card_limits(shares: Sequence[CardShare]) -> tuple[CardLimit, ...]:
    """Sum the shares per card and number the cards by PCI bus ID, as CUDA will in the container.

    Cores are capped at 100 and memory at the card's size. Raise :class:`InvalidShareError` for
    an empty claim, a share out of range, or two cards that claim one PCI bus ID.
    """
    if not shares:
        raise InvalidShareError("shares: none given; a claim needs at least one card")
    totals: dict[str, tuple[Card, int, int]] = {}
    for share in shares:
        _check_share(share)
        card = share.card
        known, cores, memory = totals.get(card.pci_bus_id, (card, 0, 0))
        if known.uuid != card.uuid:
            raise InvalidShareError(
                f"card {card.pci_bus_id}: given as {known.uuid} and {card.uuid}; one PCI bus "
                "ID is one card"
            )
        totals[card.pci_bus_id] = (card, cores + share.cores, memory + share.memory_bytes)
    return tuple(
        CardLimit(i, card, min(cores, FULL_CORES), min(memory, card.memory_bytes))
        for i, (card, cores, memory) in enumerate(totals[bus] for bus in sorted(totals))
    )
