"""The DeviceClasses the chart installs (docs/resource-model.md), as objects for tools and tests.

The Helm chart renders the same classes from its own templates; a chart test compares them
with these, so ``plan`` and ``simulate`` use exactly what a cluster gets.
"""

from __future__ import annotations

from dra_driver.api.driver import DriverNames
from dra_driver.api.gpushareconfig import GpuShareConfig, Priority


def device_class(
    name: str,
    names: DriverNames,
    config: GpuShareConfig | None = None,
    *,
    extended_resource_name: str = "",
) -> dict[str, object]:
    """Return a ``resource.k8s.io/v1`` DeviceClass selecting this driver's cards.

    ``extended_resource_name`` (``nvidia.com/gpu``) lets pods ask for a whole card as that
    extended resource, unchanged (Kubernetes' DRA-backed extended resources).
    """
    spec: dict[str, object] = {
        "selectors": [{"cel": {"expression": f'device.driver == "{names.driver}"'}}]
    }
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
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


def default_device_classes(
    names: DriverNames, *, extended_resource_name: str = ""
) -> list[dict[str, object]]:
    """Return the default class and the online/offline classes with their default config."""
    return [
        device_class(
            names.default_device_class, names, extended_resource_name=extended_resource_name
        ),
        device_class(names.online_device_class, names, GpuShareConfig(priority=Priority.ONLINE)),
        device_class(names.offline_device_class, names, GpuShareConfig(priority=Priority.OFFLINE)),
    ]
