"""The objects of the fake GPU inventory and the rules that tie cards and nodes together.

Every class checks and normalises its fields when built, so an object made in code obeys the
same rules as one decoded from YAML. The public names are re-exported by
:mod:`dra_driver.nvml.inventory`, which documents the file format.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeVar

from dra_driver.nvml.card import Card, InventoryError, set_checked
from dra_driver.nvml.fields import (
    MAX_CARDS_PER_NODE,
    boolean,
    dns_subdomain,
    label_key,
    label_value,
    labels,
    refuse,
    taint_effect,
)

# Fixed forever: generated UUIDs derive from it, and tests and recorded simulations name them.
_UUID_NAMESPACE: Final = uuidlib.UUID("63d73712-03e4-401f-ad03-b97d685d4dae")
_T = TypeVar("_T")


def _items(obj: object, attribute: str, kind: type[_T], what: str) -> tuple[_T, ...]:
    """Check that an attribute is a sequence of ``kind`` and store it as a tuple."""
    value = getattr(obj, attribute)
    if not isinstance(value, list | tuple) or not all(isinstance(v, kind) for v in value):
        raise InventoryError(type(obj).__name__, attribute, str(refuse(what, value)))
    object.__setattr__(obj, attribute, tuple(value))
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class Taint:
    """A node taint, as in a Node's ``spec.taints``."""

    key: str
    effect: str
    value: str = ""

    def __post_init__(self) -> None:
        set_checked(self, "key", "key", label_key)
        set_checked(self, "value", "value", label_value)
        set_checked(self, "effect", "effect", taint_effect)


@dataclass(frozen=True, kw_only=True)
class NodeInventory:
    """One node: its Node object's name, labels, taints and schedulability, and its cards.

    Construction checks the fields and that no two cards share a UUID, PCI bus ID, minor or
    index, and that the indexes are 0..N-1 as NVML numbers cards.
    """

    name: str
    cards: tuple[Card, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    def __post_init__(self) -> None:
        set_checked(self, "name", "name", dns_subdomain)
        set_checked(self, "labels", "labels", lambda value: MappingProxyType(labels(value)))
        set_checked(self, "unschedulable", "unschedulable", boolean)
        check_taints(_items(self, "taints", Taint, "a list of Taint"), "NodeInventory", "")
        check_cards(_items(self, "cards", Card, "a list of Card"), "NodeInventory", "")


@dataclass(frozen=True)
class Inventory:
    """The nodes of a cluster with their cards; node names and card UUIDs are unique."""

    nodes: tuple[NodeInventory, ...] = ()

    def __post_init__(self) -> None:
        nodes = _items(self, "nodes", NodeInventory, "a list of NodeInventory")
        check_nodes([(f"nodes[{i}]", node) for i, node in enumerate(nodes)], "Inventory")

    def node(self, name: str) -> NodeInventory:
        """Return the node called ``name``; raise :class:`KeyError` if there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in the inventory ({len(self.nodes)} nodes)")

    def cards(self) -> tuple[Card, ...]:
        """Return every card of the cluster, node by node in inventory order."""
        return tuple(card for node in self.nodes for card in node.cards)

    def find_card(self, uuid: str) -> tuple[NodeInventory, Card]:
        """Return the node holding the card with ``uuid`` and the card; else :class:`KeyError`."""
        for node in self.nodes:
            for card in node.cards:
                if card.uuid == uuid:
                    return node, card
        raise KeyError(f"no card {uuid!r} in the inventory")


def _unique(source: str, entries: Iterable[tuple[str, object]], what: str, scope: str) -> None:
    seen: dict[object, str] = {}
    for path, key in entries:
        if key in seen:
            shown = json.dumps(list(key) if isinstance(key, tuple) else key)
            raise InventoryError(
                source,
                path,
                f"duplicate {what} {shown}, also at {seen[key]}; "
                f"each {what} must be unique {scope}",
            )
        seen[key] = path


def check_cards(cards: Sequence[Card], source: str, prefix: str) -> None:
    """Refuse two cards of one node with the same UUID, PCI bus ID, minor or index.

    ``prefix`` (``nodes[1].``) starts every path in a message.
    """
    if len(cards) > MAX_CARDS_PER_NODE:
        problem = f"expected at most {MAX_CARDS_PER_NODE} cards, got {len(cards)}"
        raise InventoryError(source, f"{prefix}cards", problem)
    for yaml_name, attribute, what in (
        ("uuid", "uuid", "card UUID"),
        ("pciBusID", "pci_bus_id", "PCI bus ID"),
        ("minor", "minor", "minor number"),
        ("index", "index", "card index"),
    ):
        entries = (
            (f"{prefix}cards[{i}].{yaml_name}", getattr(c, attribute)) for i, c in enumerate(cards)
        )
        _unique(source, entries, what, "on a node")
    missing = sorted(set(range(len(cards))) - {card.index for card in cards})
    if missing:
        raise InventoryError(
            source,
            f"{prefix}cards",
            f"expected card indexes 0 to {len(cards) - 1} as NVML "
            f"numbers a node's cards, got no card with index {missing[0]}",
        )


def check_taints(taints: Sequence[Taint], source: str, prefix: str) -> None:
    """Refuse two taints of one node with the same key and effect, as Kubernetes does."""
    pairs = ((f"{prefix}taints[{i}]", (t.key, t.effect)) for i, t in enumerate(taints))
    _unique(source, pairs, "taint key and effect", "on a node")


def check_nodes(entries: Sequence[tuple[str, NodeInventory]], source: str) -> None:
    """Refuse two nodes with one name, or one card UUID on two nodes; paths come with the nodes."""
    _unique(source, ((f"{p}.name", n.name) for p, n in entries), "node name", "in the cluster")
    uuids = ((f"{p}.cards[{j}].uuid", c.uuid) for p, n in entries for j, c in enumerate(n.cards))
    _unique(source, uuids, "card UUID", "in the cluster")


def generated_card_uuid(node_name: str, index: int) -> str:
    """Return the UUID that ``count``/``generate`` give card ``index`` of node ``node_name``."""
    return f"GPU-{uuidlib.uuid5(_UUID_NAMESPACE, f'{node_name}/{index}')}"
