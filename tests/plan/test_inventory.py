"""A cluster from an inventory: the plugin's own slices, the chart's classes, real Node objects."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpushare_simulator.harness import cluster as test_cluster
from plan.builders import NAMES

from dra_driver.nvml.inventory import NodeInventory, Taint, builtin_inventory
from dra_driver.plan.errors import PlanInputError
from dra_driver.plan.inventory import inventory_cluster, node_object, node_slices, read_inventory
from dra_driver.publishing.slices import desired_slices


def test_slices_are_the_plugins_named_at_generation_1() -> None:
    """Each node's slices are desired_slices() plus what the API server adds: name, generation."""
    node = builtin_inventory("qgpu-runbook").node("node-2")
    (stored,) = node_slices(NAMES, node)
    assert stored["metadata"]["name"] == "node-2-gpushare.dra.dev-0"
    assert stored["spec"]["pool"] == {"name": "node-2", "generation": 1, "resourceSliceCount": 1}
    uid = stored["metadata"]["ownerReferences"][0]["uid"]
    (published,) = desired_slices(NAMES, "node-2", uid, node.cards)
    assert stored["spec"]["devices"] == published["spec"]["devices"]
    assert node_slices(NAMES, node) == [stored]


def test_inventory_cluster_has_every_node_its_slices_and_the_chart_classes() -> None:
    """qgpu-runbook gives two Nodes, three devices and the three default DeviceClasses."""
    cluster = inventory_cluster(NAMES, builtin_inventory("qgpu-runbook"), "inv")
    assert [n["metadata"]["name"] for n in cluster.nodes] == ["node-1", "node-2"]
    assert sum(len(s["spec"]["devices"]) for s in cluster.slices) == 3
    assert [c["metadata"]["name"] for c in cluster.classes] == [
        "gpushare.dra.dev",
        "online.gpushare.dra.dev",
        "offline.gpushare.dra.dev",
    ]
    assert cluster.claims == ()


def test_node_object_carries_labels_taints_and_unschedulable() -> None:
    """The Node of an inventory node has its hostname label, taints and cordon, for the engine."""
    node = NodeInventory(
        name="n1",
        labels={"zone": "a"},
        taints=(
            Taint(key="gpu", effect="NoSchedule"),
            Taint(key="k", value="v", effect="NoExecute"),
        ),
        unschedulable=True,
    )
    assert node_object(node) == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "labels": {"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "zone": "a"},
        },
        "spec": {
            "taints": [
                {"key": "gpu", "effect": "NoSchedule"},
                {"key": "k", "value": "v", "effect": "NoExecute"},
            ],
            "unschedulable": True,
        },
    }
    assert test_cluster.node_object is node_object


def test_read_inventory_takes_a_file_before_a_built_in_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file called like a built-in inventory wins; a name that is neither is refused."""
    monkeypatch.chdir(tmp_path)
    assert read_inventory("qgpu-runbook")[1] == "built-in inventory qgpu-runbook"
    (tmp_path / "qgpu-runbook").write_text("nodes:\n- name: only\n")
    inventory, source = read_inventory("qgpu-runbook")
    assert (source, [n.name for n in inventory.nodes]) == ("inventory qgpu-runbook", ["only"])
    with pytest.raises(PlanInputError, match="no such file, and not a built-in inventory"):
        read_inventory("nope")
