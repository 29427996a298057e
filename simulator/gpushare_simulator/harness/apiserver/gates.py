"""Feature gates: the server silently drops fields whose gate is off (``dropDisabledFields``).

On a stock 1.34/1.35 cluster ``allowMultipleAllocations``, ``requestPolicy``, capacity requests,
``shareID`` and ``consumedCapacity`` vanish on write (DRAConsumableCapacity is alpha, off), so a
driver relying on them must notice; alpha fields of 1.36/1.37 vanish likewise. As in the real
strategies, a field is kept on update when the stored object already uses a field of that gate.
Defaults per release follow each gate's history in Kubernetes' feature gate definitions
(pkg/features): the first minor release in which it is on by default is in :data:`GATES`;
``overrides`` turns gates on or off.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from gpushare_simulator.harness.apiserver.schemas import JSON

_NEVER: Final = 99  # alpha in every release we emulate
_SLICE: Final = "resourceslices.resource.k8s.io"
_CLAIM: Final = "resourceclaims.resource.k8s.io"
_TEMPLATE: Final = "resourceclaimtemplates.resource.k8s.io"
_CLASS: Final = "deviceclasses.resource.k8s.io"
_RESULTS: Final = "status.allocation.devices.results[]"


def _requests(*fields: str) -> dict[str, tuple[str, ...]]:
    spec = [
        f"{where}.{f}"
        for where in ("requests[].exactly", "requests[].firstAvailable[]")
        for f in fields
    ]
    return {
        _CLAIM: tuple(f"spec.devices.{p}" for p in spec),
        _TEMPLATE: tuple(f"spec.spec.devices.{p}" for p in spec),
    }


def _merge(*tables: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    merged: dict[str, tuple[str, ...]] = {}
    for table in tables:
        for key, paths in table.items():
            merged[key] = merged.get(key, ()) + paths
    return merged


# gate: (first minor where it is on by default, {resource: dotted paths}); "[]" walks a list,
# "{}" the values of a map; the last segment is the field dropped.
GATES: Final[dict[str, tuple[int, dict[str, tuple[str, ...]]]]] = {
    "DRAConsumableCapacity": (36, _merge(
        {_SLICE: ("spec.devices[].allowMultipleAllocations",
                  "spec.devices[].capacity{}.requestPolicy")},
        _requests("capacity"),
        {_CLAIM: ("spec.devices.constraints[].distinctAttribute", f"{_RESULTS}.shareID",
                  f"{_RESULTS}.consumedCapacity", "status.devices[].shareID")},
        {_TEMPLATE: ("spec.spec.devices.constraints[].distinctAttribute",)},
    )),
    "DRAPartitionableDevices": (36, {_SLICE: (
        "spec.sharedCounters", "spec.perDeviceNodeSelection", "spec.devices[].consumesCounters",
        "spec.devices[].nodeName", "spec.devices[].nodeSelector", "spec.devices[].allNodes",
    )}),
    "DRADeviceTaints": (36, _merge(
        {_SLICE: ("spec.devices[].taints",), _CLAIM: (f"{_RESULTS}.tolerations",)},
        _requests("tolerations"),
    )),
    "DRADeviceBindingConditions": (36, {
        _SLICE: ("spec.devices[].bindingConditions", "spec.devices[].bindingFailureConditions",
                 "spec.devices[].bindsToNode"),
        _CLAIM: (f"{_RESULTS}.bindingConditions", f"{_RESULTS}.bindingFailureConditions",
                 "status.allocation.allocationTimestamp"),
    }),
    "DRAExtendedResource": (36, {_CLASS: ("spec.extendedResourceName",)}),
    "DRAListTypeAttributes": (_NEVER, {_SLICE: tuple(
        f"spec.devices[].attributes{{}}.{kind}" for kind in ("bools", "ints", "strings", "versions")
    )}),
    "DRANodeAllocatableResources": (_NEVER, {_SLICE: (
        "spec.devices[].nodeAllocatableResourceMappings", "spec.devices[].nodeAllocatableResources",
    )}),
    "DRAOptionalNodeOperations": (_NEVER, {
        _SLICE: ("spec.skipNodeOperations",), _CLAIM: (f"{_RESULTS}.skipNodeOperations",),
    }),
    "DRAPartitionableDevicesType": (_NEVER, {_SLICE: ("spec.partitionTypeAttribute",)}),
    "DRADeviceCompatibilityGroups": (_NEVER, {
        _SLICE: ("spec.devices[].consumesCounters[].compatibilityGroups",),
    }),
    "DRADerivedAttributes": (_NEVER, _requests("derivedAttributes")),
}  # fmt: skip


def _holders(node: object, segments: list[str]) -> Iterator[tuple[dict[str, object], str]]:
    """Yield ``(parent, key)`` for every place the path reaches a present field."""
    if not isinstance(node, dict) or not segments:
        return
    head, rest = segments[0], segments[1:]
    name = head.removesuffix("[]").removesuffix("{}")
    if name not in node:
        return
    if not rest:
        yield node, name
        return
    child = node[name]
    if head.endswith("[]"):
        children = child if isinstance(child, list) else []
    elif head.endswith("{}"):
        children = list(child.values()) if isinstance(child, dict) else []
    else:
        children = [child]
    for item in children:
        yield from _holders(item, rest)


class FeatureGates:
    """The gates of one emulated release, with overrides."""

    def __init__(self, minor: int, overrides: Mapping[str, bool] | None = None) -> None:
        unknown = set(overrides or {}) - set(GATES)
        if unknown:
            raise ValueError(f"unknown feature gates {sorted(unknown)}; known: {sorted(GATES)}")
        self.enabled = {name: minor >= since for name, (since, _) in GATES.items()}
        self.enabled.update(overrides or {})

    def drop_disabled(self, resource: str, obj: JSON, old: JSON | None) -> list[str]:
        """Remove fields of disabled gates from ``obj`` (unless ``old`` uses them); return paths."""
        dropped = []
        for name, (_, tables) in GATES.items():
            paths = tables.get(resource, ())
            if self.enabled[name] or not paths:
                continue
            if old is not None and any(next(_holders(old, p.split(".")), None) for p in paths):
                continue
            for path in paths:
                for parent, key in list(_holders(obj, path.split("."))):
                    del parent[key]
                    dropped.append(path)
        return dropped
