"""Manifests shared by the harness tests: a two-node cluster, a DeviceClass, a share template."""

from __future__ import annotations

from harness.minimal_plugin import DRIVER

from dra_driver.nvml.inventory import Inventory, NodeInventory

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
