"""A cluster from a fake GPU inventory: the Nodes and the slices the kubelet plugin would publish.

The slices come from :func:`~dra_driver.publishing.slices.desired_slices`, the function the
plugin itself publishes, so a plan sees exactly the devices a real node with those cards
offers. The DeviceClasses are the ones the chart installs.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Final

from dra_driver.api import DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.k8s.objects import Object
from dra_driver.nvml.inventory import (
    BUILTIN_INVENTORIES,
    Inventory,
    InventoryError,
    NodeInventory,
    builtin_inventory,
    load_inventory,
)
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.errors import PlanInputError
from dra_driver.publishing.slices import desired_slices
from dra_driver.publishing.slicesync import with_generation

# Fixed, so the same inventory always yields the same node UIDs (slices name them as owners).
_NODE_UID_NAMESPACE: Final = uuid.UUID("0b7c6f5e-4d1a-4f3e-9a55-2f1c8e6d9b30")


def node_object(node: NodeInventory) -> Object:
    """Build the Node object the cluster registers for an inventory node."""
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", **node.labels}
    spec: Object = {}
    if node.taints:
        spec["taints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect}
            if t.value
            else {"key": t.key, "effect": t.effect}
            for t in node.taints
        ]
    if node.unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": spec,
    }


def node_slices(names: DriverNames, node: NodeInventory, *, shared: bool = True) -> list[Object]:
    """Return the node's slices as the API server would store them: named, generation 1.

    ``shared=False``: the whole-only devices a plugin publishes on 1.34/1.35 without consumable
    capacity, where device taints are off too, so unhealthy cards are left out; with both (1.36
    on) an unhealthy card is published with the plugin's default ``NoSchedule`` taint.
    """
    node_uid = str(uuid.uuid5(_NODE_UID_NAMESPACE, node.name))
    slices = []
    unhealthy = "NoSchedule" if shared else None
    published = desired_slices(
        names, node.name, node_uid, node.cards, shared=shared, unhealthy=unhealthy
    )
    for index, slice_ in enumerate(published):
        stored = with_generation(slice_, 1)
        metadata = stored["metadata"]
        stored["metadata"] = {**metadata, "name": f"{metadata['generateName']}{index}"}
        slices.append(stored)
    return slices


def read_inventory(given: str) -> tuple[Inventory, str]:
    """Load ``given``, a file or else a built-in inventory name; return it and its description.

    Raise :class:`PlanInputError` when it is neither, or when the file is refused.
    """
    path = Path(given)
    try:
        if path.exists():
            return load_inventory(path), f"inventory {given}"
        if given in BUILTIN_INVENTORIES:
            return builtin_inventory(given), f"built-in inventory {given}"
    except InventoryError as exc:
        raise PlanInputError(str(exc)) from None
    raise PlanInputError(
        f"--inventory {given}: no such file, and not a built-in inventory "
        f"({', '.join(BUILTIN_INVENTORIES)})"
    )


def inventory_cluster(
    names: DriverNames, inventory: Inventory, source: str, *, shared: bool = True
) -> ClusterObjects:
    """Return the cluster the inventory describes, with no claims allocated yet."""
    return ClusterObjects(
        source=source if shared else f"{source}, without consumable capacity",
        nodes=tuple(node_object(node) for node in inventory.nodes),
        slices=tuple(
            s for node in inventory.nodes for s in node_slices(names, node, shared=shared)
        ),
        classes=tuple(default_device_classes(names)),
    )
