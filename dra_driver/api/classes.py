"""The DeviceClasses the chart installs (docs/resource-model.md), as objects for tools and tests.

The Helm chart renders the same classes from its own templates; a chart test compares them
with these, so ``plan`` and ``simulate`` use exactly what a cluster gets.
"""

from __future__ import annotations

from dra_driver.api.driver import DriverNames
from dra_driver.api.gpushareconfig import GpuShareConfig, Priority


def device_class(
    name: str, names: DriverNames, config: GpuShareConfig | None = None
) -> dict[str, object]:
    """Return a ``resource.k8s.io/v1`` DeviceClass selecting this driver's cards."""
    spec: dict[str, object] = {
        "selectors": [{"cel": {"expression": f'device.driver == "{names.driver}"'}}]
    }
    if config is not None:
        spec["config"] = [
            {"opaque": {"driver": names.driver, "parameters": config.to_parameters(names)}}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def default_device_classes(names: DriverNames) -> list[dict[str, object]]:
    """Return the default class and the online/offline classes with their default config."""
    return [
        device_class(names.default_device_class, names),
        device_class(names.online_device_class, names, GpuShareConfig(priority=Priority.ONLINE)),
        device_class(names.offline_device_class, names, GpuShareConfig(priority=Priority.OFFLINE)),
    ]
