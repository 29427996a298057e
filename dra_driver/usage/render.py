"""How card usage is written for people and for tools, the same in every command.

Cores are plain quantities (``40``, ``12.5``), memory binary ones (``5Gi``); a table pads each
column to its widest cell. ``card_json`` is the document ``plan -o json`` and ``simulate
-o json`` give for a card (keys camelCase, amounts as quantity strings); ``status`` names its
cards with the same keys (``card_identity``) and adds its own fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Final

from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import QuantityFormat, format_quantity
from dra_driver.usage.model import CardUse, PublishedCard

GAP: Final = "  "


def cores(value: Fraction) -> str:
    """Write cores as a quantity: ``40``, ``12.5``."""
    return format_quantity(value)


def memory(value: Fraction) -> str:
    """Write bytes as a binary quantity: ``5Gi``."""
    return format_quantity(value, QuantityFormat.BINARY)


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Return the rows with every column padded to its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        GAP.join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def cores_of_total(use: CardUse) -> str:
    """``used/total`` cores of the card."""
    return f"{cores(use.cores_used)}/{cores(use.card.cores)}"


def memory_of_total(use: CardUse) -> str:
    """``used/total`` memory of the card."""
    return f"{memory(use.memory_used)}/{memory(use.card.memory)}"


def card_identity(card: PublishedCard) -> Object:
    """Return the keys that name a card in every JSON document: node, device and UUID."""
    return {"node": card.node, "device": card.device, "uuid": card.uuid}


def card_json(use: CardUse) -> Object:
    """Return one card's usage as a JSON object."""
    card = use.card
    return {
        **card_identity(card),
        "pciBusID": card.pci_bus_id,
        "shares": len(use.shares),
        "whole": use.whole,
        "cores": {"used": cores(use.cores_used), "total": cores(card.cores)},
        "memory": {"used": memory(use.memory_used), "total": memory(card.memory)},
    }
