"""Our devices as the engine sees them, read from this driver's node-local ResourceSlices.

Only each pool's newest generation counts (consumers of a pool use only its slices of the
highest generation), judged per node as kube-scheduler does; a malformed slice or device is
left out and reported, never fatal.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from dra_driver.engine.load import Model, Models
from dra_driver.k8s.objects import Object
from dra_driver.structured import cel
from dra_driver.structured.allocated import DeviceId
from dra_driver.structured.consumable import Capacity, parse_capacities

MALFORMED = (TypeError, ValueError, KeyError, AttributeError)
"""What reading a malformed object raises; such an object is skipped, never fatal."""

PCI_BUS_ID = "resource.kubernetes.io/pciBusID"


@dataclasses.dataclass(frozen=True, eq=False)
class Device:
    """One device of a slice, with what allocation needs precomputed."""

    id: DeviceId
    node: str
    capacities: Mapping[str, Capacity]
    shareable: bool
    """Published with ``allowMultipleAllocations``: shares carry a shareID and amounts."""
    plain: bool
    """Published whole-only (the API server has no consumable capacity), yet shared by the
    controller's own accounting with shares sized by config (:mod:`configshares`)."""
    attributes: Mapping[str, Any]
    """Fully qualified attribute name -> its value (int, bool, str, :class:`Version`)."""
    taints: tuple[Object, ...]
    model: Model
    """Devices of one model consume and rank alike; the engine memoizes per model."""
    raw: Object
    """The device as its slice lists it (shared with the informer's copy, never changed)."""

    @property
    def variable(self) -> Mapping[str, Any]:
        """The CEL value of ``device``, built when a selector needs it.

        Not kept: the matcher remembers each selector's result per device, so it is built
        once per selector, and thousands of devices do not each hold one for their lifetime.
        """
        return cel.device_variable(self.id[0], self.raw)

    @property
    def name(self) -> str:
        """The device name within its pool."""
        return self.id[2]

    @property
    def label(self) -> str:
        """How messages name the device: ``node/device``."""
        return f"{self.node}/{self.id[2]}"

    @property
    def sort_key(self) -> tuple[str, str]:
        """Deterministic order: PCI bus ID (the CUDA order), then name."""
        return (str(self.attributes.get(PCI_BUS_ID, "")), self.id[2])


class Version(str):
    """A ``version`` attribute's text: its type keeps it apart from a string of the same text."""

    __slots__ = ()


def typed_value(value: object) -> tuple[type, object]:
    """Return an attribute value with its type, to compare values as kube-scheduler does."""
    return type(value), value


def _attribute_value(value: Mapping[str, Any]) -> Any:  # noqa: ANN401 - one of several types
    for kind in ("int", "bool", "string", "version", "ints", "bools", "strings", "versions"):
        if kind in value:
            item = value[kind]
            if kind == "version":
                return Version(item)
            return tuple(item) if isinstance(item, list) else item
    return None


def qualified_attributes(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """Return the device's attributes keyed by fully qualified name (``<domain>/<id>``)."""
    attributes = {}
    for name, value in (device.get("attributes") or {}).items():
        # Interned: every device of a cluster spells the same few names.
        key = sys.intern(name if "/" in name else f"{driver}/{name}")
        attributes[key] = _attribute_value(value or {})
    return attributes


@dataclasses.dataclass(frozen=True)
class _Slice:
    name: str
    node: str
    pool: str
    generation: int
    count: int
    devices: tuple[Object, ...]


def _read_slice(driver: str, slice_: Object) -> _Slice | None:
    """Return the parts of one of our node-local slices, or ``None`` for another driver's."""
    spec = slice_["spec"]
    if spec.get("driver") != driver:
        return None
    name = str(slice_["metadata"]["name"])
    if not spec.get("nodeName"):
        raise ValueError("not node-local")
    pool = spec["pool"]
    devices = spec.get("devices") or []
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise TypeError("spec.devices is not a list of objects")
    return _Slice(
        name=name,
        node=str(spec["nodeName"]),
        pool=str(pool["name"]),
        generation=int(pool.get("generation") or 0),
        count=int(pool.get("resourceSliceCount") or 1),
        devices=tuple(devices),
    )


def _slice_label(slice_: object, index: int) -> str:
    """Name a slice in a message: by its name, or by its place when it has none."""
    metadata = slice_.get("metadata") if isinstance(slice_, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) and name else f"#{index}"


def _device(
    driver: str, node: str, pool: str, raw: Object, *, models: Models, share_plain: bool
) -> Device:
    taints = tuple(raw.get("taints") or ())
    if not all(isinstance(taint, dict) for taint in taints):
        raise TypeError("taints are not objects")
    capacities = parse_capacities(raw)
    shareable = bool(raw.get("allowMultipleAllocations"))
    plain = share_plain and not shareable and bool(capacities)
    model = models.get(shareable, capacities, plain=plain)
    return Device(
        id=(driver, pool, str(raw["name"])),
        node=node,
        capacities=model.capacities,  # equal to the parsed ones, shared by the model's cards
        shareable=shareable,
        plain=plain,
        model=model,
        attributes=qualified_attributes(driver, raw),
        taints=taints,
        raw=raw,
    )


def read_devices(
    driver: str, slices: list[Object], problems: list[str], share_plain: bool
) -> tuple[list[Device], dict[str, dict[str, str]]]:
    """Our node-local devices each node may use, and per node the pools it may not, and why.

    Pools are judged per node, as kube-scheduler does: a node sees its own slices of a pool
    at their newest generation. When it sees fewer than the pool's ``resourceSliceCount``,
    the other nodes' slices decide: a newer generation elsewhere makes these obsolete (the
    pool is ignored here), too few slices of this generation anywhere make it incomplete.
    An incomplete pool, or one naming a device twice, gives no device. A device is one
    ``(driver, pool, name)`` wherever it is listed, so its allocations count everywhere.
    A malformed slice or device is left out and reported; it never hides the others.
    """
    ours: list[_Slice] = []
    for index, slice_ in enumerate(slices):
        try:
            read = _read_slice(driver, slice_)
        except MALFORMED as exc:
            problems.append(f"ResourceSlice {_slice_label(slice_, index)}: {exc!s}; ignored")
            continue
        if read is not None:
            ours.append(read)
    by_pool: dict[str, list[_Slice]] = {}
    by_node_pool: dict[tuple[str, str], list[_Slice]] = {}
    for read in sorted(ours, key=lambda r: r.name):
        by_pool.setdefault(read.pool, []).append(read)
        by_node_pool.setdefault((read.node, read.pool), []).append(read)
    models = Models()
    devices: list[Device] = []
    unusable: dict[str, dict[str, str]] = {}
    for (node, pool), seen in by_node_pool.items():
        generation = max(read.generation for read in seen)
        current = [read for read in seen if read.generation == generation]
        everywhere = by_pool[pool]
        if len(current) != current[0].count:
            if any(read.generation > generation for read in everywhere):
                continue  # obsolete: the driver is replacing it, on another node
            if sum(read.generation == generation for read in everywhere) != current[0].count:
                unusable.setdefault(node, {})[pool] = "is being updated"
                continue
        found = _pool_devices(
            driver, current, models=models, problems=problems, share_plain=share_plain
        )
        if isinstance(found, str):
            unusable.setdefault(node, {})[pool] = found
            problems.append(f"pool {pool} on node {node} {found}: none of its cards is used")
            continue
        devices += found
    return devices, unusable


def _pool_devices(
    driver: str,
    slices: list[_Slice],
    *,
    models: Models,
    problems: list[str],
    share_plain: bool,
) -> list[Device] | str:
    """Return the devices of one node's slices of a pool, or why the pool is invalid."""
    names: set[str] = set()
    devices = []
    for read in slices:
        for raw in read.devices:
            name = str(raw.get("name"))
            if name in names:
                return f"lists device {name} twice"
            names.add(name)
            try:
                devices.append(
                    _device(
                        driver, read.node, read.pool, raw, models=models, share_plain=share_plain
                    )
                )
            except MALFORMED as exc:
                problems.append(f"ResourceSlice {read.name}: device {name}: {exc!s}")
    return devices
