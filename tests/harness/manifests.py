"""Manifests shared by the harness tests: a two-node cluster, a DeviceClass, a share template."""

from __future__ import annotations

from typing import Any

from dra_driver.nvml.inventory import Inventory, NodeInventory

DRIVER = "gpushare.dra.dev"


def device(name: str, memory: str = "16Gi", *, shareable: bool = True) -> dict[str, Any]:
    """Build a card as the kubelet plugin publishes it: cores and memory as consumable capacity."""
    published: dict[str, Any] = {"name": name, "attributes": {"uuid": {"string": f"GPU-{name}"}}}
    if not shareable:
        published["capacity"] = {"memory": {"value": memory}}
        return published
    published["allowMultipleAllocations"] = True
    published["capacity"] = {
        "cores": {
            "value": "100",
            "requestPolicy": {
                "default": "100",
                "validRange": {"min": "0", "max": "100", "step": "1"},
            },
        },
        "memory": {
            "value": memory,
            "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "step": "1Mi"}},
        },
    }
    return published


INVENTORY = Inventory(nodes=(NodeInventory(name="node-a"), NodeInventory(name="node-b")))

DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRIVER},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
}
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "share-5g"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "capacity": {"requests": {"cores": "30", "memory": "5Gi"}},
                        },
                    }
                ]
            }
        }
    },
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "infer"},
    "spec": {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "share-5g"}],
        "containers": [
            {"name": "server", "image": "server", "resources": {"claims": [{"name": "gpu"}]}}
        ],
    },
}
