"""The fake GPU inventory: which nodes a cluster has and which cards each holds, as YAML.

The NVML fake backend, the test harness, ``gpushare-dra simulate`` and ``gpushare-dra plan``
read this format, so a test cluster is a file instead of hardware; docs/inventory.md documents
it for users, field by field. Decoding is strict: an unknown or duplicate field, a
wrong type, a malformed UUID, PCI bus ID or memory size, or a card identity used twice raises
:class:`InventoryError`, whose message names the file, the YAML path and what is allowed::

    inv.yaml: nodes[1].cards[0].memory: expected a memory size: ..., got the string "80GB"

Explicit form (what :func:`dump_inventory` writes)::

    nodes:
    - name: node-1             # a DNS subdomain; optional: labels, taints, unschedulable
      cards:
      - uuid: GPU-5f6e2bd7-0b6c-4d21-9d2e-3a8f3c1e7a01
        productName: NVIDIA A100-SXM4-80GB
        memory: 80Gi           # bytes, or a whole number with Ki, Mi, Gi or Ti
        pciBusID: "0000:3b:00.0"
        minor: 0               # /dev/nvidia0
        index: 0               # NVML index; a node's cards are numbered 0..N-1
        numaNode: 0            # optional
        architecture: Ampere
        cudaComputeCapability: "8.0"
        driverVersion: "550.54.15"
        health: Healthy        # optional: Healthy (default) or Unhealthy, with healthMessage

Shorthands. A node may give ``count: N`` and a card ``template`` (the card fields without
``uuid``, ``pciBusID``, ``minor`` and ``index``; ``numaNodes: K`` spreads the cards evenly over
NUMA nodes 0..K-1) instead of ``cards``. A top-level ``generate: {nodes: 100, namePrefix:
gpu-node-, cardsPerNode: 8, card: <template>}`` (optional ``labels``, ``taints``,
``unschedulable``) adds nodes ``gpu-node-1`` … ``gpu-node-100`` after the explicit ones.
Generated card ``i`` of N on node ``n`` gets UUID ``GPU-<uuid5(fixed namespace, "n/i")>``, PCI
bus ID ``0000:<0x18 + i*step>:00.0`` with ``step = min(0x10, 0xe8 // N)``, and minor = index
= i; so a file always yields the same inventory.

Memory sizes take only binary suffixes: ``80G`` would mean 80·10⁹ bytes, 5.5 GiB short of the
``80Gi`` that was almost certainly meant, so decimal suffixes and fractions are refused. A
``null`` optional field counts as unset.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar

import yaml

from dra_driver.nvml._inventory_model import (
    Inventory,
    NodeInventory,
    Taint,
    check_cards,
    check_nodes,
    check_taints,
    generated_card_uuid,
)
from dra_driver.nvml.card import Card, InventoryError
from dra_driver.nvml.fields import (
    CARD_FIELDS,
    MAX_CARDS_PER_NODE,
    MAX_GENERATED_NODES,
    FieldValueError,
    Health,
    child,
    dns_subdomain,
    format_quantity,
    integer,
    normalize_pci_bus_id,
    nullable,
    parse_quantity,
    refuse,
)

__all__ = [
    "BUILTIN_INVENTORIES",
    "Card",
    "Health",
    "Inventory",
    "InventoryError",
    "NodeInventory",
    "Taint",
    "builtin_inventory",
    "dump_inventory",
    "format_quantity",
    "generated_card_uuid",
    "load_inventory",
    "normalize_pci_bus_id",
    "parse_inventory",
    "parse_quantity",
]

BUILTIN_INVENTORIES: Final = ("hundred-nodes", "one-node-one-card", "qgpu-runbook")
_T = TypeVar("_T")
_MERGE: Final = "tag:yaml.org,2002:merge"


class _Mapping(dict[object, object]):
    """A YAML mapping that remembers keys given twice, so the decoder can refuse them."""

    duplicates: tuple[object, ...] = ()


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that duplicate mapping keys are recorded, not overwritten."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> Iterator[_Mapping]:
    data = _Mapping()
    yield data
    # Keys first: construct_mapping folds merge keys (<<) into node.value, changing it.
    keys = [loader.construct_object(k, deep=True) for k, _ in node.value if k.tag != _MERGE]
    data.update(loader.construct_mapping(node))  # refuses unhashable keys itself
    seen: set[object] = set()
    duplicates = []
    for key in keys:
        if key in seen:
            duplicates.append(key)
        seen.add(key)
    data.duplicates = tuple(duplicates)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def parse_inventory(text: str, source: str = "<string>") -> Inventory:
    """Decode an inventory from YAML ``text``; ``source`` names it in error messages."""
    try:
        document = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        where = error.problem_mark or error.context_mark
        at = f" at line {where.line + 1} column {where.column + 1}" if where else ""
        problem = " ".join(part for part in (error.context, error.problem) if part)
        raise InventoryError(source, "", f"invalid YAML{at}: {problem}") from None
    except yaml.YAMLError as error:
        raise InventoryError(source, "", f"invalid YAML: {error}") from None
    return _Decoder(source).inventory(document)


def load_inventory(path: Path) -> Inventory:
    """Read and decode the inventory file at ``path``; a read error is an InventoryError too."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InventoryError(str(path), "", f"cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InventoryError(str(path), "", f"not UTF-8 text (byte {error.start})") from None
    return parse_inventory(text, str(path))


@functools.cache
def builtin_inventory(name: str) -> Inventory:
    """Return one of the inventories shipped in the package, by a name in BUILTIN_INVENTORIES."""
    if name not in BUILTIN_INVENTORIES:
        available = ", ".join(BUILTIN_INVENTORIES)
        raise InventoryError("builtin inventories", "", f"no {name!r}; available: {available}")
    resource = resources.files("dra_driver.nvml") / "inventories" / f"{name}.yaml"
    return parse_inventory(resource.read_text(encoding="utf-8"), f"builtin inventory {name}")


def dump_inventory(inventory: Inventory) -> str:
    """Write ``inventory`` in the explicit form; :func:`parse_inventory` reads it back equal."""
    nodes = [_node_document(node) for node in inventory.nodes]
    return yaml.safe_dump({"nodes": nodes}, sort_keys=False, allow_unicode=True, width=100)


def _node_document(node: NodeInventory) -> dict[str, object]:
    document: dict[str, object] = {"name": node.name}
    if node.labels:
        document["labels"] = dict(node.labels)
    if node.taints:
        document["taints"] = [
            {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
            for t in node.taints
        ]
    if node.unschedulable:
        document["unschedulable"] = True
    document["cards"] = [_card_document(card) for card in node.cards]
    return document


def _card_document(card: Card) -> dict[str, object]:
    written = {"memory": format_quantity(card.memory_bytes), "health": str(card.health)}
    return {
        spec.yaml_name: written.get(spec.yaml_name, getattr(card, spec.attribute))
        for spec in CARD_FIELDS
        if getattr(card, spec.attribute) is not None
    }


class _Decoder:
    """Turns a decoded YAML document into an :class:`Inventory`, tracking YAML paths."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: object) -> NoReturn:
        raise InventoryError(self.source, path, str(problem))

    def fields(
        self, value: object, path: str, required: Sequence[str], optional: Sequence[str] = ()
    ) -> Mapping[object, Any]:
        """Check a mapping's keys: no duplicates, none unknown, every required one present."""
        if not isinstance(value, dict):
            self.fail(path, refuse("a mapping", value))
        for key in getattr(value, "duplicates", ()):
            self.fail(child(path, key), "duplicate field; each field may appear only once")
        allowed = (*required, *optional)
        for key in value:
            if key not in allowed:
                names = ", ".join(sorted(allowed))
                self.fail(child(path, key), f"unknown field; allowed fields: {names}")
        for key in required:
            if key not in value:
                self.fail(child(path, key), "required field is missing")
        return value

    def convert(self, path: str, convert: Callable[[object], _T], value: object) -> _T:
        try:
            return convert(value)
        except FieldValueError as problem:
            self.fail(path, problem)

    def build(self, path: str, factory: Callable[..., _T], **values: object) -> _T:
        """Build a model object; its own refusal gets this file and the path of the object."""
        try:
            return factory(**values)
        except InventoryError as error:
            self.fail(f"{path}.{error.path}" if path else error.path, error.problem)

    def listed(self, value: object, path: str, what: str) -> list[object]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, refuse(what, value))
        return value

    def inventory(self, document: object) -> Inventory:
        if document is None:
            self.fail("", "expected a mapping with nodes and/or generate, got an empty document")
        top = self.fields(document, "", (), ("generate", "nodes"))
        if not top:
            self.fail("", "expected at least one of the fields generate, nodes")
        entries = [
            (f"nodes[{i}]", self.node(item, f"nodes[{i}]"))
            for i, item in enumerate(self.listed(top.get("nodes"), "nodes", "a list of nodes"))
        ]
        if "generate" in top:
            taken = {node.name: f"{path}.name" for path, node in entries}
            entries += [("generate", node) for node in self.generate(top["generate"], taken)]
        check_nodes(entries, self.source)
        return Inventory(tuple(node for _, node in entries))

    def node(self, value: object, path: str) -> NodeInventory:
        node = self.fields(
            value,
            path,
            ("name",),
            ("cards", "count", "labels", "taints", "template", "unschedulable"),
        )
        name = self.convert(child(path, "name"), dns_subdomain, node["name"])
        if "count" in node or "template" in node:
            if "cards" in node:
                self.fail(child(path, "cards"), "expected either cards, or count and template")
            for key in ("count", "template"):
                if key not in node:
                    self.fail(
                        child(path, key),
                        "required field is missing: count and template go together",
                    )
            count = self.convert(
                child(path, "count"), integer(1, MAX_CARDS_PER_NODE), node["count"]
            )
            cards = self.template_cards(name, count, node["template"], child(path, "template"))
        else:
            raw = self.listed(node.get("cards"), child(path, "cards"), "a list of cards")
            cards = tuple(self.card(item, f"{path}.cards[{i}]") for i, item in enumerate(raw))
            check_cards(cards, self.source, f"{path}.")
        return self.node_object(path, name, cards, node)

    def node_object(
        self, path: str, name: str, cards: tuple[Card, ...], node: Mapping[object, Any]
    ) -> NodeInventory:
        taints = [
            self.taint(item, f"{child(path, 'taints')}[{i}]")
            for i, item in enumerate(
                self.listed(node.get("taints"), child(path, "taints"), "a list of taints")
            )
        ]
        check_taints(taints, self.source, f"{path}.")
        given = {key: node[key] for key in ("labels", "unschedulable") if node.get(key) is not None}
        return self.build(path, NodeInventory, name=name, cards=cards, taints=taints, **given)

    def taint(self, value: object, path: str) -> Taint:
        taint = self.fields(value, path, ("key", "effect"), ("value",))
        value_given = {"value": taint["value"]} if taint.get("value") is not None else {}
        return self.build(path, Taint, key=taint["key"], effect=taint["effect"], **value_given)

    def card(self, value: object, path: str) -> Card:
        required = [spec.yaml_name for spec in CARD_FIELDS if spec.required]
        optional = [spec.yaml_name for spec in CARD_FIELDS if not spec.required]
        return self.build(path, Card, **_card_values(self.fields(value, path, required, optional)))

    def template_cards(
        self, node_name: str, count: int, value: object, path: str
    ) -> tuple[Card, ...]:
        template_fields = [spec for spec in CARD_FIELDS if not spec.per_card]
        required = [spec.yaml_name for spec in template_fields if spec.required]
        optional = [spec.yaml_name for spec in template_fields if not spec.required]
        template = self.fields(value, path, required, [*optional, "numaNodes"])
        if template.get("numaNode") is not None and template.get("numaNodes") is not None:
            self.fail(child(path, "numaNodes"), "expected numaNode or numaNodes, not both")
        numa_nodes = self.convert(
            child(path, "numaNodes"), nullable(integer(1, 4096)), template.get("numaNodes")
        )
        values = _card_values(template)
        step = max(1, min(0x10, 0xE8 // count))
        return tuple(
            self.build(
                path,
                Card,
                **values,
                **({"numa_node": i * numa_nodes // count} if numa_nodes else {}),
                uuid=generated_card_uuid(node_name, i),
                pci_bus_id=f"0000:{0x18 + i * step:02x}:00.0",
                minor=i,
                index=i,
            )
            for i in range(count)
        )

    def generate(self, value: object, taken: Mapping[str, str]) -> list[NodeInventory]:
        spec = self.fields(
            value,
            "generate",
            ("cardsPerNode", "card", "namePrefix", "nodes"),
            ("labels", "taints", "unschedulable"),
        )
        count = self.convert("generate.nodes", integer(1, MAX_GENERATED_NODES), spec["nodes"])
        per_node = self.convert(
            "generate.cardsPerNode", integer(1, MAX_CARDS_PER_NODE), spec["cardsPerNode"]
        )
        prefix = spec["namePrefix"]
        names = [f"{prefix}{i}" for i in range(1, count + 1)]
        for name in (names[0], names[-1]):  # all alike but for the digits; the last is longest
            if not isinstance(prefix, str) or not _is_node_name(name):
                rule = "a prefix that with a number appended makes a DNS subdomain"
                self.fail("generate.namePrefix", refuse(rule, prefix))
        for name in names:
            if name in taken:
                self.fail(
                    "generate.namePrefix",
                    f"generated node name {json.dumps(name)} is "
                    f"already used at {taken[name]}; node names must be unique",
                )
        return [
            self.node_object(
                "generate",
                name,
                self.template_cards(name, per_node, spec["card"], "generate.card"),
                spec,
            )
            for name in names
        ]


def _is_node_name(name: str) -> bool:
    try:
        dns_subdomain(name)
    except FieldValueError:
        return False
    return True


def _card_values(card: Mapping[object, Any]) -> dict[str, object]:
    """Map YAML card fields to Card attributes; a null optional field is left out (unset)."""
    return {
        spec.attribute: card[spec.yaml_name]
        for spec in CARD_FIELDS
        if spec.yaml_name in card and (spec.required or card[spec.yaml_name] is not None)
    }
