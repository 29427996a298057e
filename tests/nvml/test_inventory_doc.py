"""docs/inventory.md, checked against the real loader so the document cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.cli.main import main
from dra_driver.nvml.inventory import Health, Inventory, InventoryError, parse_inventory
from dra_driver.plan.inventory import node_object, node_slices

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "inventory.md"
NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)

_TEMPLATE = """
    productName: Tesla T4
    memory: 15360Mi
    architecture: Turing
    cudaComputeCapability: "7.5"
    driverVersion: "535.161.08"
"""
_ONE_NODE = "nodes:\n- name: n1\n  count: 1\n  template:" + _TEMPLATE


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def full_example() -> str:
    section = doc_text().split("\n## A full example\n", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the full example section has no YAML block"
    return block.group(1)


def example_inventory() -> Inventory:
    return parse_inventory(full_example(), "docs/inventory.md")


def test_the_full_example_has_the_nodes_and_cards_the_doc_counts() -> None:
    """The loader reads the example as the doc's N nodes and M cards, K of them shareable."""
    stated = re.search(r"\*\*(\d+) nodes and (\d+) cards\*\*, of which \*\*(\d+)\*\*", doc_text())
    assert stated is not None, "the doc no longer says how many nodes and cards"
    nodes, cards, published = (int(n) for n in stated.groups())
    inventory = example_inventory()
    assert len(inventory.nodes) == nodes
    assert len(inventory.cards()) == cards
    devices = [
        device
        for node in inventory.nodes
        for slice_ in node_slices(NAMES, node)
        for device in slice_["spec"]["devices"]
        if not device.get("taints")
    ]
    assert len(devices) == published


def test_the_full_example_yields_what_the_doc_describes() -> None:
    """Node order, template PCI bus IDs and NUMA nodes, the taint, cordon and unhealthy card."""
    inventory = example_inventory()
    names = [node.name for node in inventory.nodes]
    assert names == ["a100-1", "l4-1", "spare-1", "h100-1", "h100-2", "h100-3"]
    for name in names:
        assert f"`{name}`" in doc_text()
    l4 = inventory.node("l4-1")
    assert [c.pci_bus_id for c in l4.cards] == [
        "0000:18:00.0",
        "0000:28:00.0",
        "0000:38:00.0",
        "0000:48:00.0",
    ]
    assert [c.numa_node for c in l4.cards] == [0, 0, 1, 1]
    assert [(t.key, t.value, t.effect) for t in l4.taints] == [
        ("gpu.example.com/dedicated", "inference", "NoSchedule")
    ]
    assert node_object(inventory.node("spare-1"))["spec"] == {"unschedulable": True}
    assert node_object(inventory.node("h100-2"))["metadata"]["labels"] == {
        "kubernetes.io/hostname": "h100-2",
        "kubernetes.io/os": "linux",
        "gpu.example.com/model": "h100",
    }
    unhealthy = [c for c in inventory.cards() if c.health is Health.UNHEALTHY]
    assert [(c.uuid, c.index) for c in unhealthy] == [
        ("GPU-7a1d0e3c-5b2f-4c8e-9d6a-1f0b3e2c4d5a", 1)
    ]


def test_the_documented_plan_command_runs_on_the_full_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gpushare-dra plan --inventory inventory.yaml` with the doc's example exits 0."""
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(full_example(), encoding="utf-8")
    workload = ROOT / "deploy" / "examples" / "plan" / "scenarios.yaml"
    argv = ["plan", "--inventory", str(inventory), "--workload", str(workload)]
    assert main(argv, environ={}) == 0
    assert "cluster:  inventory " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "path", "problem"),
    [
        ("", "", "expected a mapping with nodes and/or generate, got an empty document"),
        (
            _ONE_NODE.replace('"7.5"', "7.5"),
            "nodes[0].template.cudaComputeCapability",
            'expected a quoted "<major>.<minor>" string such as "8.0" (unquoted, YAML reads a '
            "number), got the number 7.5",
        ),
        (
            _ONE_NODE.replace("15360Mi", "80GB"),
            "nodes[0].template.memory",
            "expected a memory size: a whole number of bytes from 1 to 2^63-1, or a whole number "
            "with a binary suffix Ki, Mi, Gi or Ti such as 80Gi (decimal suffixes such as G are "
            'ambiguous and refused), got the string "80GB"',
        ),
        (
            _ONE_NODE + _ONE_NODE.removeprefix("nodes:\n"),
            "nodes[1].name",
            'duplicate node name "n1", also at nodes[0].name; each node name must be unique in '
            "the cluster",
        ),
        (
            _ONE_NODE.replace("  count: 1\n", "  count: 1\n  cards: []\n"),
            "nodes[0].cards",
            "expected either cards, or count and template",
        ),
        (
            _ONE_NODE.replace("- name: n1\n", "- name: n1\n  name: n2\n"),
            "nodes[0].name",
            "duplicate field; each field may appear only once",
        ),
        (
            _ONE_NODE.replace("  count: 1\n", "  count: 129\n"),
            "nodes[0].count",
            "expected an integer from 1 to 128, got the number 129",
        ),
    ],
    ids=[
        "empty",
        "unquoted",
        "decimal-suffix",
        "duplicate-node",
        "cards-and-count",
        "twice",
        "129",
    ],
)
def test_a_documented_refusal_is_what_the_loader_says(text: str, path: str, problem: str) -> None:
    """Each refusal the doc shows (or a case of its table) comes from the loader, word for word."""
    with pytest.raises(InventoryError) as refused:
        parse_inventory(text, "inv.yaml")
    assert (refused.value.path, refused.value.problem) == (path, problem)
    assert problem in " ".join(doc_text().split()), problem
