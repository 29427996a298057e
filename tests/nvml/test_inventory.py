"""The fake GPU inventory: builtins, exact refusals, generated IDs, quantities, round trip."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.nvml import inventory as inventory_module
from dra_driver.nvml.inventory import (
    BUILTIN_INVENTORIES,
    Card,
    Health,
    Inventory,
    InventoryError,
    NodeInventory,
    Taint,
    builtin_inventory,
    dump_inventory,
    format_quantity,
    generated_card_uuid,
    load_inventory,
    normalize_pci_bus_id,
    parse_inventory,
    parse_quantity,
)

GI = 2**30
MI = 2**20
INVENTORIES_DIR = Path(inventory_module.__file__).parent / "inventories"
UUID_A = "GPU-0efc110c-12c1-5f96-b4ff-304e5c339d3c"
UUID_B = "GPU-26975e32-62e5-543b-ac29-e97c231c6291"
MEMORY_RULE = (
    "expected a memory size: a whole number of bytes from 1 to 2^63-1, or a whole number with a "
    "binary suffix Ki, Mi, Gi or Ti such as 80Gi (decimal suffixes such as G are ambiguous and "
    "refused)"
)
UUID_RULE = 'expected "GPU-" and a UUID in lowercase hex (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)'
PCI_RULE = 'expected a PCI bus ID domain:bus:device.function in hex, quoted (e.g. "0000:3b:00.0")'
CARD_FIELDS = (
    "architecture, cudaComputeCapability, driverVersion, health, healthMessage, index, memory, "
    "minor, numaNode, pciBusID, productName, uuid"
)
TEMPLATE = (
    "{productName: Tesla T4, memory: 15360Mi, architecture: Turing, "
    "cudaComputeCapability: '7.5', driverVersion: '535.161.08'"
)


def card(**changes: object) -> str:
    """Return a valid card as a YAML flow mapping, with fields replaced (None drops one)."""
    fields: dict[str, object] = {
        "uuid": UUID_A,
        "productName": "NVIDIA A100-SXM4-80GB",
        "memory": "80Gi",
        "pciBusID": '"0000:07:00.0"',
        "minor": 0,
        "index": 0,
        "architecture": "Ampere",
        "cudaComputeCapability": '"8.0"',
        "driverVersion": '"550.54.15"',
    }
    fields.update(changes)
    return "{" + ", ".join(f"{k}: {v}" for k, v in fields.items() if v is not None) + "}"


def one_node(*cards: str) -> str:
    """Return an inventory of node-1 holding ``cards``."""
    return "nodes:\n- name: node-1\n  cards:\n" + "".join(f"  - {c}\n" for c in cards)


SECOND = {"uuid": UUID_B, "pciBusID": '"0000:08:00.0"', "minor": 1, "index": 1}

MALFORMED = [
    pytest.param(
        "nodes: []\ncolour: red\n",
        "colour: unknown field; allowed fields: generate, nodes",
        id="unknown-top-level-field",
    ),
    pytest.param("- name: node-1\n", "expected a mapping, got a list", id="document-is-a-list"),
    pytest.param(
        "", "expected a mapping with nodes and/or generate, got an empty document", id="empty"
    ),
    pytest.param(
        "nodes: [\n",
        "invalid YAML at line 2 column 1: while parsing a flow node expected the node content, "
        "but found '<stream end>'",
        id="yaml-syntax",
    ),
    pytest.param(
        "nodes: []\n---\nnodes: []\n",
        "invalid YAML at line 2 column 1: expected a single document in the stream but found "
        "another document",
        id="two-documents",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  name: node-2\n",
        "nodes[0].name: duplicate field; each field may appear only once",
        id="duplicate-yaml-key",
    ),
    pytest.param(
        "nodes:\n- name: Node_1\n",
        "nodes[0].name: expected a DNS subdomain (lowercase letters, digits, '-' and '.', at most "
        '253 chars), got the string "Node_1"',
        id="node-name-not-dns",
    ),
    pytest.param(
        one_node(card(memroy="80Gi")),
        f"nodes[0].cards[0].memroy: unknown field; allowed fields: {CARD_FIELDS}",
        id="unknown-card-field",
    ),
    pytest.param(
        one_node(card(uuid=None)),
        "nodes[0].cards[0].uuid: required field is missing",
        id="missing-uuid",
    ),
    pytest.param(
        one_node(card(minor='"0"')),
        'nodes[0].cards[0].minor: expected an integer from 0 to 254, got the string "0"',
        id="minor-is-a-string",
    ),
    pytest.param(
        one_node(card(minor=255)),
        "nodes[0].cards[0].minor: expected an integer from 0 to 254, got the number 255",
        id="minor-is-nvidiactl",
    ),
    pytest.param(
        one_node(card(uuid="GPU-0EFC110C-12c1-5f96-b4ff-304e5c339d3c")),
        f'nodes[0].cards[0].uuid: {UUID_RULE}, got the string "GPU-0EFC110C-12c1-5f96-b4ff-'
        '304e5c339d3c"',
        id="uuid-uppercase",
    ),
    pytest.param(
        one_node(card(pciBusID='"3b:00.0"')),
        f'nodes[0].cards[0].pciBusID: {PCI_RULE}, got the string "3b:00.0"',
        id="pci-without-domain",
    ),
    pytest.param(
        one_node(card(pciBusID="0000:18:00.0")),
        f"nodes[0].cards[0].pciBusID: {PCI_RULE}, got the number 1080.0",
        id="pci-unquoted-read-as-sexagesimal",
    ),
    pytest.param(
        one_node(card(memory="80GB")),
        f'nodes[0].cards[0].memory: {MEMORY_RULE}, got the string "80GB"',
        id="memory-gb",
    ),
    pytest.param(
        one_node(card(memory="80G")),
        f'nodes[0].cards[0].memory: {MEMORY_RULE}, got the string "80G"',
        id="memory-decimal-suffix",
    ),
    pytest.param(
        one_node(card(memory="1.5Gi")),
        f'nodes[0].cards[0].memory: {MEMORY_RULE}, got the string "1.5Gi"',
        id="memory-fraction",
    ),
    pytest.param(
        one_node(card(memory=0)),
        f"nodes[0].cards[0].memory: {MEMORY_RULE}, got the number 0",
        id="memory-zero",
    ),
    pytest.param(
        one_node(card(cudaComputeCapability="8.0")),
        'nodes[0].cards[0].cudaComputeCapability: expected a quoted "<major>.<minor>" string such '
        'as "8.0" (unquoted, YAML reads a number), got the number 8.0',
        id="compute-capability-unquoted",
    ),
    pytest.param(
        one_node(card(driverVersion=550)),
        "nodes[0].cards[0].driverVersion: expected a quoted version of two or three "
        'dot-separated numbers such as "550.54.15", got the number 550',
        id="driver-version-number",
    ),
    pytest.param(
        one_node(card(productName="x" * 65)),
        "nodes[0].cards[0].productName: expected a non-empty printable string of at most 64 "
        f'characters, got the string "{"x" * 64}"...',
        id="product-name-too-long",
    ),
    pytest.param(
        one_node(card(health="Sick")),
        'nodes[0].cards[0].health: expected one of "Healthy", "Unhealthy", got the string "Sick"',
        id="health-unknown",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n- name: node-2\n- name: node-1\n",
        'nodes[2].name: duplicate node name "node-1", also at nodes[0].name; each node name must '
        "be unique in the cluster",
        id="duplicate-node-name",
    ),
    pytest.param(
        one_node(card(), card(**{**SECOND, "uuid": UUID_A})),
        f'nodes[0].cards[1].uuid: duplicate card UUID "{UUID_A}", also at nodes[0].cards[0].uuid; '
        "each card UUID must be unique on a node",
        id="duplicate-uuid-on-node",
    ),
    pytest.param(
        one_node(card(), card(**{**SECOND, "pciBusID": '"0000:07:00.0"'})),
        'nodes[0].cards[1].pciBusID: duplicate PCI bus ID "0000:07:00.0", also at '
        "nodes[0].cards[0].pciBusID; each PCI bus ID must be unique on a node",
        id="duplicate-pci-bus-id",
    ),
    pytest.param(
        one_node(card(), card(**{**SECOND, "pciBusID": '"00000000:07:00.0"'})),
        'nodes[0].cards[1].pciBusID: duplicate PCI bus ID "0000:07:00.0", also at '
        "nodes[0].cards[0].pciBusID; each PCI bus ID must be unique on a node",
        id="duplicate-pci-bus-id-after-normalising",
    ),
    pytest.param(
        one_node(card(), card(**{**SECOND, "minor": 0})),
        "nodes[0].cards[1].minor: duplicate minor number 0, also at nodes[0].cards[0].minor; "
        "each minor number must be unique on a node",
        id="duplicate-minor",
    ),
    pytest.param(
        one_node(card(), card(**{**SECOND, "index": 0})),
        "nodes[0].cards[1].index: duplicate card index 0, also at nodes[0].cards[0].index; "
        "each card index must be unique on a node",
        id="duplicate-index",
    ),
    pytest.param(
        one_node(card(), card(**{**SECOND, "index": 2})),
        "nodes[0].cards: expected card indexes 0 to 1 as NVML numbers a node's cards, got no "
        "card with index 1",
        id="index-gap",
    ),
    pytest.param(
        one_node(card()) + f"- name: node-2\n  cards:\n  - {card()}\n",
        f'nodes[1].cards[0].uuid: duplicate card UUID "{UUID_A}", also at nodes[0].cards[0].uuid; '
        "each card UUID must be unique in the cluster",
        id="duplicate-uuid-in-cluster",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  count: 2\n  cards: []\n",
        "nodes[0].cards: expected either cards, or count and template",
        id="count-with-cards",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  count: 2\n",
        "nodes[0].template: required field is missing: count and template go together",
        id="count-without-template",
    ),
    pytest.param(
        f"nodes:\n- name: node-1\n  count: 2\n  template: {TEMPLATE}, uuid: {UUID_A}}}\n",
        "nodes[0].template.uuid: unknown field; allowed fields: architecture, "
        "cudaComputeCapability, driverVersion, health, healthMessage, memory, numaNode, "
        "numaNodes, productName",
        id="template-with-uuid",
    ),
    pytest.param(
        f"nodes:\n- name: node-1\n  count: 129\n  template: {TEMPLATE}}}\n",
        "nodes[0].count: expected an integer from 1 to 128, got the number 129",
        id="count-above-slice-limit",
    ),
    pytest.param(
        f"nodes:\n- name: node-1\n  count: 2\n"
        f"  template: {TEMPLATE}, numaNode: 0, numaNodes: 2}}\n",
        "nodes[0].template.numaNodes: expected numaNode or numaNodes, not both",
        id="numa-node-and-numa-nodes",
    ),
    pytest.param(
        f"nodes:\n- name: node-1\n  count: 1\n  template: {TEMPLATE}, memory: 16GB}}\n".replace(
            "memory: 15360Mi, ", ""
        ),
        f'nodes[0].template.memory: {MEMORY_RULE}, got the string "16GB"',
        id="template-memory",
    ),
    pytest.param(
        f"generate: {{nodes: 2, namePrefix: GPU_, cardsPerNode: 1, card: {TEMPLATE}}}}}\n",
        "generate.namePrefix: expected a prefix that with a number appended makes a DNS "
        'subdomain, got the string "GPU_"',
        id="generate-bad-prefix",
    ),
    pytest.param(
        "nodes:\n- name: gpu-2\n"
        f"generate: {{nodes: 2, namePrefix: gpu-, cardsPerNode: 1, card: {TEMPLATE}}}}}\n",
        'generate.namePrefix: generated node name "gpu-2" is already used at nodes[0].name; '
        "node names must be unique",
        id="generate-name-collision",
    ),
    pytest.param(
        "generate: {nodes: 2, namePrefix: gpu-}\n",
        "generate.cardsPerNode: required field is missing",
        id="generate-without-cards",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  labels: {gpu: true}\n",
        "nodes[0].labels.gpu: expected a label value: a string, empty or at most 63 letters, "
        "digits, '-', '_' and '.', got the boolean true",
        id="label-value-boolean",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  labels: {'-bad': x}\n",
        "nodes[0].labels[\"-bad\"]: expected a label key: an optional DNS subdomain and '/', then "
        'a name of at most 63 chars, got the string "-bad"',
        id="label-key",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  taints: [{key: gpu, effect: NoWay}]\n",
        'nodes[0].taints[0].effect: expected one of "NoExecute", "NoSchedule", '
        '"PreferNoSchedule", got the string "NoWay"',
        id="taint-effect",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  taints: [{key: a, effect: NoSchedule}, "
        "{key: a, value: x, effect: NoSchedule}]\n",
        'nodes[0].taints[1]: duplicate taint key and effect ["a", "NoSchedule"], also at '
        "nodes[0].taints[0]; each taint key and effect must be unique on a node",
        id="duplicate-taint",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  unschedulable: 'yes'\n",
        'nodes[0].unschedulable: expected a boolean (true or false), got the string "yes"',
        id="unschedulable-string",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  cards: {a: b}\n",
        "nodes[0].cards: expected a list of cards, got a mapping",
        id="cards-not-a-list",
    ),
    pytest.param(
        "nodes:\n- name: node-1\n  'a.b': 1\n",
        'nodes[0]["a.b"]: unknown field; allowed fields: cards, count, labels, name, taints, '
        "template, unschedulable",
        id="odd-key-quoted-in-path",
    ),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_inventory_is_refused_with_exact_message(text: str, message: str) -> None:
    """Each malformed inventory is refused naming the file, the YAML path and what is allowed."""
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, "inv.yaml")
    assert str(caught.value) == f"inv.yaml: {message}"
    assert caught.value.source == "inv.yaml"


@pytest.mark.parametrize(
    ("name", "nodes", "cards_per_node", "product", "memory"),
    [
        ("one-node-one-card", 1, [1], "NVIDIA A100-SXM4-80GB", 80 * GI),
        ("qgpu-runbook", 2, [1, 2], "Tesla T4", 15360 * MI),
        ("hundred-nodes", 100, [8] * 100, "NVIDIA H100 80GB HBM3", 80 * GI),
    ],
)
def test_builtin_inventory_loads_with_expected_shape(
    name: str, nodes: int, cards_per_node: list[int], product: str, memory: int
) -> None:
    """Every shipped inventory parses and has the documented nodes, cards and card model."""
    inventory = builtin_inventory(name)
    assert len(inventory.nodes) == nodes
    assert [len(node.cards) for node in inventory.nodes] == cards_per_node
    assert {(c.product_name, c.memory_bytes) for c in inventory.cards()} == {(product, memory)}
    assert all(card.health is Health.HEALTHY for card in inventory.cards())


def test_builtin_names_match_the_shipped_files() -> None:
    """BUILTIN_INVENTORIES lists exactly the YAML files inside the package, sorted."""
    files = sorted(p.stem for p in INVENTORIES_DIR.glob("*.yaml"))
    assert list(BUILTIN_INVENTORIES) == files


def test_runbook_cluster_has_the_runbook_node_names() -> None:
    """The runbook inventory has node-1 with one card and node-2 with two distinct cards."""
    inventory = builtin_inventory("qgpu-runbook")
    assert [node.name for node in inventory.nodes] == ["node-1", "node-2"]
    node_2 = inventory.node("node-2")
    assert [c.pci_bus_id for c in node_2.cards] == ["0000:00:08.0", "0000:00:09.0"]
    assert [(c.index, c.minor) for c in node_2.cards] == [(0, 0), (1, 1)]


def test_hundred_nodes_are_named_and_spread_over_numa_nodes() -> None:
    """The generate shorthand names nodes gpu-node-1..100 and puts cards 0-3/4-7 on NUMA 0/1."""
    inventory = builtin_inventory("hundred-nodes")
    assert [n.name for n in inventory.nodes] == [f"gpu-node-{i}" for i in range(1, 101)]
    assert [c.numa_node for c in inventory.nodes[0].cards] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_unknown_builtin_lists_the_available_names() -> None:
    """Asking for a builtin that does not exist names every one that does."""
    with pytest.raises(InventoryError) as caught:
        builtin_inventory("ten-nodes")
    assert str(caught.value) == (
        "builtin inventories: no 'ten-nodes'; available: "
        "hundred-nodes, one-node-one-card, qgpu-runbook"
    )


def test_generated_identities_are_deterministic_and_unique() -> None:
    """Parsing the generated cluster twice gives equal UUIDs and bus IDs, all unique as required."""
    text = (INVENTORIES_DIR / "hundred-nodes.yaml").read_text()
    first, second = parse_inventory(text), parse_inventory(text)
    assert first == second
    uuids = [card.uuid for card in first.cards()]
    assert len(set(uuids)) == len(uuids) == 800
    for node in first.nodes:
        buses = [card.pci_bus_id for card in node.cards]
        assert buses == sorted(set(buses))
        assert [c.uuid for c in node.cards] == [generated_card_uuid(node.name, i) for i in range(8)]


def test_generated_uuid_is_pinned() -> None:
    """The UUID derivation never changes: shipped files and recorded runs depend on its values."""
    assert generated_card_uuid("node-1", 0) == UUID_A
    assert generated_card_uuid("gpu-node-1", 0) == "GPU-49de4408-b69c-5878-93de-579b4d412df1"


@pytest.mark.parametrize("count", [1, 2, 8, 14, 15, 16, 100, 128])
def test_generated_pci_bus_ids_are_valid_and_increasing(count: int) -> None:
    """For any card count, generated bus IDs are normalised, strictly increasing and in range."""
    text = f"nodes:\n- name: node-1\n  count: {count}\n  template: {TEMPLATE}}}\n"
    node = parse_inventory(text).nodes[0]
    buses = [card.pci_bus_id for card in node.cards]
    assert buses == sorted(set(buses))
    assert all(normalize_pci_bus_id(bus) == bus for bus in buses)
    assert [c.index for c in node.cards] == [c.minor for c in node.cards] == list(range(count))


@pytest.mark.parametrize(
    ("quantity", "size"),
    [
        ("80Gi", 80 * GI),
        ("81920Mi", 80 * GI),
        ("15360Mi", 15360 * MI),
        ("1Ki", 1024),
        ("2Ti", 2 * 2**40),
        ("85899345920", 80 * GI),
        (85899345920, 80 * GI),
        ("1", 1),
        ("9223372036854775807", 2**63 - 1),
    ],
)
def test_quantity_parses(quantity: str | int, size: int) -> None:
    """Whole numbers of bytes and binary-suffixed whole numbers parse to bytes."""
    assert parse_quantity(quantity) == size


@pytest.mark.parametrize(
    "quantity",
    [
        *("80G", "80GB", "80gi", "1.5Gi", "80 Gi", " 80Gi", "0", "-1", "", "Gi", "1e9", "8Ei"),
        *(0, -5, True, 1.5, None, "9223372036854775808", 2**63, "9" * 30),
    ],
)
def test_quantity_refuses(quantity: object) -> None:
    """Decimal suffixes, fractions, signs, zero, overflow and non-numbers are refused."""
    with pytest.raises(ValueError, match=r"^expected a memory size: ") as caught:
        parse_quantity(quantity)
    assert str(caught.value).startswith(MEMORY_RULE)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (80 * GI, "80Gi"),
        (15360 * MI, "15Gi"),
        (15361 * MI, "15361Mi"),
        (1536, "1536"),
        (2**40, "1Ti"),
    ],
)
def test_quantity_formats_with_largest_exact_suffix(size: int, text: str) -> None:
    """format_quantity writes the largest binary suffix that divides the size exactly."""
    assert format_quantity(size) == text


@given(st.integers(1, 2**63 - 1))
def test_quantity_format_round_trips(size: int) -> None:
    """Every representable size survives format_quantity then parse_quantity."""
    assert parse_quantity(format_quantity(size)) == size


@pytest.mark.parametrize(
    ("given_id", "normalised"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("0001:C1:1F.7", "0001:c1:1f.7"),
    ],
)
def test_pci_bus_id_normalises_nvml_form(given_id: str, normalised: str) -> None:
    """NVML's 8-digit upper-case domain form and the short form normalise alike."""
    assert normalize_pci_bus_id(given_id) == normalised


@pytest.mark.parametrize(
    "bad", ["0000:3b:20.0", "0000:3b:00.8", "00010000:3b:00.0", "3b:00.0", "0000:3b:00", 1080.0]
)
def test_pci_bus_id_refuses_malformed(bad: object) -> None:
    """Device above 0x1f, function above 7, a non-zero upper domain and partial IDs are refused."""
    with pytest.raises(ValueError, match=r"^expected a PCI bus ID"):
        normalize_pci_bus_id(bad)


def test_card_built_in_code_is_normalised_and_checked() -> None:
    """Card() normalises the PCI bus ID and memory quantity and refuses a bad field by YAML name."""
    values: dict[str, object] = {
        "uuid": UUID_A,
        "product_name": "Tesla T4",
        "memory_bytes": "15360Mi",
        "pci_bus_id": "00000000:00:08.0",
        "minor": 0,
        "index": 0,
        "architecture": "Turing",
        "cuda_compute_capability": "7.5",
        "driver_version": "535.161.08",
    }
    made = Card(**values)  # type: ignore[arg-type]
    assert (made.memory_bytes, made.pci_bus_id) == (15360 * MI, "0000:00:08.0")
    with pytest.raises(InventoryError) as caught:
        Card(**{**values, "pci_bus_id": "8:0"})  # type: ignore[arg-type]
    assert str(caught.value) == f'Card: pciBusID: {PCI_RULE}, got the string "8:0"'


def test_objects_built_in_code_enforce_uniqueness() -> None:
    """NodeInventory and Inventory refuse duplicates even when not built from YAML."""
    a = builtin_inventory("one-node-one-card").nodes[0].cards[0]
    with pytest.raises(InventoryError, match=r"^NodeInventory: cards\[1\]\.uuid: duplicate"):
        NodeInventory(name="n", cards=(a, a))
    node = NodeInventory(name="n", cards=(a,))
    with pytest.raises(InventoryError, match=r"^Inventory: nodes\[1\]\.name: duplicate node name"):
        Inventory((node, node))


def test_inventory_lookups() -> None:
    """node(), cards() and find_card() find what exists and raise KeyError for what does not."""
    inventory = builtin_inventory("qgpu-runbook")
    second = inventory.node("node-2").cards[1]
    assert inventory.find_card(second.uuid) == (inventory.node("node-2"), second)
    assert len(inventory.cards()) == 3
    with pytest.raises(KeyError, match="node-3"):
        inventory.node("node-3")
    with pytest.raises(KeyError, match="GPU-x"):
        inventory.find_card("GPU-x")


def test_load_inventory_names_the_file(tmp_path: Path) -> None:
    """load_inventory reads a file, and names it in both decode and read errors."""
    path = tmp_path / "cluster.yaml"
    path.write_text(one_node(card(health="Unhealthy", healthMessage="XID 79")))
    loaded = load_inventory(path)
    assert loaded.cards()[0].health is Health.UNHEALTHY
    assert loaded.cards()[0].health_message == "XID 79"
    path.write_text("nodes: 3\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value) == f"{path}: nodes: expected a list of nodes, got the number 3"
    with pytest.raises(InventoryError) as missing:
        load_inventory(tmp_path / "absent.yaml")
    assert (
        str(missing.value) == f"{tmp_path / 'absent.yaml'}: cannot read: No such file or directory"
    )


def test_yaml_anchors_and_merge_keys_are_not_duplicates() -> None:
    """An anchored card merged with << and overridden is read as one card, not a duplicate key."""
    text = (
        "nodes:\n- name: node-1\n  cards:\n"
        f"  - &t {card()}\n"
        f"  - <<: *t\n    uuid: {UUID_B}\n    pciBusID: '0000:08:00.0'\n"
        "    minor: 1\n    index: 1\n"
    )
    cards = parse_inventory(text).cards()
    assert [c.uuid for c in cards] == [UUID_A, UUID_B]


def test_null_optional_fields_are_unset() -> None:
    """A null optional field means unset, as in the Kubernetes API."""
    text = "nodes:\n- name: node-1\n  labels:\n  taints:\n  cards:\n" + (
        f"  - {card(numaNode='null', health='null', healthMessage='null')}\n"
    )
    node = parse_inventory(text).nodes[0]
    assert (node.labels, node.taints, node.cards[0].numa_node) == ({}, (), None)
    assert node.cards[0].health is Health.HEALTHY


# ---- round trip -------------------------------------------------------------------------------

printable = st.characters(categories=("L", "N", "P", "S"), include_characters=" ")
label_names = st.from_regex(r"[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,8}[a-zA-Z0-9])?", fullmatch=True)
label_keys = st.builds(
    lambda prefix, name: f"{prefix}/{name}" if prefix else name,
    st.sampled_from(["", "example.com", "gpu.example.org"]),
    label_names,
)
taints = st.builds(
    Taint,
    key=label_keys,
    value=st.just("") | label_names,
    effect=st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
)


@st.composite
def node_cards(draw: st.DrawFn, uuids: list[str]) -> tuple[Card, ...]:
    count = len(uuids)
    buses = draw(st.lists(st.integers(0, 2**32 - 1), min_size=count, max_size=count, unique=True))
    minors = draw(st.lists(st.integers(0, 254), min_size=count, max_size=count, unique=True))
    indexes = draw(st.permutations(range(count)))
    return tuple(
        Card(
            uuid=uuid,
            product_name=draw(st.text(printable, min_size=1, max_size=64)),
            memory_bytes=draw(st.integers(1, 2**63 - 1)),
            pci_bus_id=_bus_id(bus),
            minor=minor,
            index=index,
            architecture=draw(st.sampled_from(["Ampere", "Hopper", "Ada Lovelace", "Turing"])),
            cuda_compute_capability=draw(st.from_regex(r"[0-9]\.[0-9]", fullmatch=True)),
            driver_version=draw(st.from_regex(r"[0-9]{3}\.[0-9]{2}(\.[0-9]{2})?", fullmatch=True)),
            numa_node=draw(st.none() | st.integers(0, 4095)),
            health=draw(st.sampled_from(Health)),
            health_message=draw(st.none() | st.text(printable, min_size=1, max_size=80)),
        )
        for uuid, bus, minor, index in zip(uuids, buses, minors, indexes, strict=True)
    )


def _bus_id(number: int) -> str:
    """Spread an integer over domain, bus, device (<= 0x1f) and function (<= 7)."""
    function, number = number % 8, number // 8
    device, number = number % 0x20, number // 0x20
    bus, domain = number % 0x100, number // 0x100 % 0x10000
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    names = draw(
        st.lists(
            st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,10}[a-z0-9])?", fullmatch=True).filter(
                lambda n: ".." not in n and "-." not in n and ".-" not in n
            ),
            max_size=4,
            unique=True,
        )
    )
    sizes = [draw(st.integers(0, 4)) for _ in names]
    uuids = draw(st.lists(st.uuids(), min_size=sum(sizes), max_size=sum(sizes), unique=True))
    nodes, start = [], 0
    for name, size in zip(names, sizes, strict=True):
        chunk = [f"GPU-{u}" for u in uuids[start : start + size]]
        start += size
        node_taints = draw(st.lists(taints, max_size=3, unique_by=lambda t: (t.key, t.effect)))
        nodes.append(
            NodeInventory(
                name=name,
                cards=draw(node_cards(chunk)),
                labels=draw(st.dictionaries(label_keys, st.just("") | label_names, max_size=3)),
                taints=tuple(node_taints),
                unschedulable=draw(st.booleans()),
            )
        )
    return Inventory(tuple(nodes))


@settings(max_examples=200)
@given(inventories())
def test_dump_then_parse_round_trips(inventory: Inventory) -> None:
    """Any valid inventory, written by dump_inventory, parses back equal."""
    assert parse_inventory(dump_inventory(inventory)) == inventory


def test_builtins_round_trip_through_the_explicit_form() -> None:
    """Each shipped inventory, shorthands expanded, dumps to an explicit form that reads back."""
    for name in BUILTIN_INVENTORIES:
        inventory = builtin_inventory(name)
        text = dump_inventory(inventory)
        assert "generate" not in text
        assert "template" not in text
        assert parse_inventory(text) == inventory


def test_error_message_json_quotes_user_text() -> None:
    """A hostile value cannot forge lines in a message: it is shown JSON-escaped and cut short."""
    with pytest.raises(InventoryError) as caught:
        parse_inventory(one_node(card(health=json.dumps("a\nb"))), "inv.yaml")
    assert "\n" not in str(caught.value)
    assert set(str(caught.value)) <= set(string.printable)


def test_strings_yaml_would_retype_survive_the_round_trip() -> None:
    """Strings YAML 1.1 reads as other types ("yes", "null", "0123", "1e3") are dumped quoted."""
    tricky = ["yes", "no", "on", "null", "true", "0123", "1e3", "0x1f", "1_000", "12:30", "~"]
    base = vars(builtin_inventory("one-node-one-card").cards()[0])
    cards = tuple(
        Card(**{**base, "product_name": text, "architecture": text, "health_message": text})
        for text in tricky
    )
    labels = {f"k{i}": text for i, text in enumerate(tricky) if text not in ("12:30", "~")}
    for made in cards:
        node = NodeInventory(name="node-1", cards=(made,), labels=labels)
        assert parse_inventory(dump_inventory(Inventory((node,)))) == Inventory((node,))
