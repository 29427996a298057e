"""What the allocation engine decides on: a consistent, read-only picture of the cluster.

Built from raw API objects (as informers hold them) by pure code. Only this driver's
node-local ResourceSlices at their pool's newest generation become devices (consumers of a
pool use only its slices of the highest generation); every allocated claim, whoever allocated
it, feeds the accounting, because kube-scheduler allocates the same cards to pods that skip
the controller (docs/resource-model.md, "How a claim gets its card").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from dra_driver.api import ConfigError, DriverNames, Priority
from dra_driver.controller.engine.load import Load, Model, Models
from dra_driver.structured import cel
from dra_driver.structured.allocated import AllocatedState, DeviceId
from dra_driver.structured.config import share_config
from dra_driver.structured.consumable import Capacity, parse_capacities

Object = dict[str, Any]

PCI_BUS_ID = "resource.kubernetes.io/pciBusID"


@dataclasses.dataclass(frozen=True, eq=False)
class Device:
    """One device of a slice, with what allocation needs precomputed."""

    id: DeviceId
    node: str
    capacities: Mapping[str, Capacity]
    shareable: bool
    attributes: Mapping[str, Any]
    """Fully qualified attribute name -> its value (int, bool, str, :class:`Version`)."""
    taints: tuple[Object, ...]
    variable: Mapping[str, Any]
    """The CEL value of ``device``."""
    model: Model
    """Devices of one model consume and rank alike; the engine memoizes per model."""

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
        key = name if "/" in name else f"{driver}/{name}"
        attributes[key] = _attribute_value(value or {})
    return attributes


@dataclasses.dataclass
class Snapshot:
    """The cluster as one allocation decision sees it; build with :meth:`build`."""

    names: DriverNames
    nodes: dict[str, Object]
    devices: dict[str, tuple[Device, ...]]
    """This driver's devices per node name, in :attr:`Device.sort_key` order."""
    by_id: dict[DeviceId, Device]
    classes: dict[str, Object]
    state: AllocatedState
    priorities: dict[DeviceId, dict[Priority, int]]
    """How many shares of each priority each of our devices has (placement uses it)."""
    unusable_pools: dict[str, dict[str, str]]
    """Node -> pool -> why none of the pool's devices may be used there (kube-scheduler's
    incomplete and invalid pools)."""
    problems: list[str]
    counted: dict[str, Object]
    """Claim UID -> the version of the claim whose allocation is counted."""
    load: Load
    """Free capacity per device and node, kept in step with :attr:`state`."""
    counted_names: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    """``(namespace, name)`` -> the UID counted under that name."""
    memo: dict[object, Any] = dataclasses.field(default_factory=dict)
    """Static results that hold as long as the devices do (see :class:`Matcher`)."""

    @classmethod
    def build(
        cls,
        names: DriverNames,
        *,
        nodes: Iterable[Object],
        slices: Iterable[Object],
        classes: Iterable[Object],
        claims: Iterable[Object],
    ) -> Snapshot:
        """Assemble a snapshot from raw objects; malformed pieces become ``problems``."""
        problems: list[str] = []
        devices, unusable = _devices(names.driver, list(slices), problems)
        by_node: dict[str, list[Device]] = {}
        for device in devices:
            by_node.setdefault(device.node, []).append(device)
        state = AllocatedState()
        snapshot = cls(
            names=names,
            nodes={str(node["metadata"]["name"]): node for node in nodes},
            devices={
                node: tuple(sorted(found, key=lambda d: d.sort_key))
                for node, found in by_node.items()
            },
            by_id={device.id: device for device in devices},
            classes={str(c["metadata"]["name"]): c for c in classes},
            state=state,
            priorities={},
            counted={},
            unusable_pools=unusable,
            problems=problems,
            load=Load(state, {}),
        )
        for claim in claims:
            snapshot.update_claim(claim)
        problems.extend(snapshot.state.problems)
        # Indexed once the claims are in: cheaper than re-sorting a node per claim.
        snapshot.load = Load(
            state,
            {
                node: [(d.id, d.capacities, d.model) for d in found]
                for node, found in snapshot.devices.items()
            },
        )
        return snapshot

    def update_claim(self, claim: Object) -> None:
        """Count ``claim`` as it is now, replacing whatever was counted for its UID.

        Idempotent: the controller calls it after each of its writes, and a claim counted by
        :meth:`build` is never counted twice.
        """
        try:
            uid = str((claim.get("metadata") or {}).get("uid") or "")
            allocated = bool((claim.get("status") or {}).get("allocation"))
        except _MALFORMED as exc:
            self.problems.append(f"a claim: {exc!s}; not counted")
            return
        self.remove_claim(uid)
        if allocated:
            self.state.add_claim(claim)
            self._count_priorities(claim, 1)
            self.counted[uid] = claim
            self.counted_names[_name_of(claim)] = uid
            self.load.refresh(_device_ids(claim))

    def remove_claim(self, uid: str) -> None:
        """Stop counting the claim with ``uid`` (its allocation ended or it is gone)."""
        counted = self.counted.pop(uid, None)
        if counted is not None:
            if self.counted_names.get(_name_of(counted)) == uid:
                del self.counted_names[_name_of(counted)]
            self.state.remove_claim(counted)
            self._count_priorities(counted, -1)
            self.load.refresh(_device_ids(counted))

    def overcommitted(self, claims: Iterable[Object]) -> list[str]:
        """Say which of our cards the claims' allocations share with more than they hold."""
        problems = []
        for device_id in dict.fromkeys(d for claim in claims for d in _device_ids(claim)):
            device = self.by_id.get(device_id)
            problem = device and self.state.overcommitted(device_id, device.capacities)
            if device and problem:
                problems.append(f"card {device.label}: {problem}")
        return problems

    def _count_priorities(self, claim: Object, sign: int) -> None:
        try:
            allocation = claim["status"]["allocation"]
            devices = allocation.get("devices") or {}
            results = list(devices.get("results") or [])
            configs = list(devices.get("config") or [])
        except _MALFORMED:
            return  # AllocatedState reports malformed allocations already
        for result in results:
            if not isinstance(result, dict):
                continue
            device_id = (result.get("driver"), result.get("pool"), result.get("device"))
            if device_id not in self.by_id or result.get("adminAccess"):
                continue
            try:
                config = share_config(
                    configs,
                    self.names,
                    str(result.get("request", "")),
                    path="status.allocation.devices.config",
                )
            except (ConfigError, *_MALFORMED):
                # The kubelet plugin refuses such a claim; it still holds its capacity.
                config = share_config([], self.names, "", path="")
            counts = self.priorities.setdefault(device_id, {})
            priority = config.effective().priority
            counts[priority] = counts.get(priority, 0) + sign


_MALFORMED = (TypeError, ValueError, KeyError, AttributeError)
"""What reading a malformed object raises; such an object is skipped, never fatal."""


def _name_of(claim: Object) -> tuple[str, str]:
    metadata = claim.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _device_ids(claim: Object) -> list[DeviceId]:
    """Return the devices a claim's allocation names (malformed results are skipped)."""
    try:
        results = claim["status"]["allocation"]["devices"]["results"]
        return [
            (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for r in results
            if isinstance(r, dict)
        ]
    except (*_MALFORMED, IndexError):
        return []


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


def _device(driver: str, node: str, pool: str, raw: Object, models: Models) -> Device:
    taints = tuple(raw.get("taints") or ())
    if not all(isinstance(taint, dict) for taint in taints):
        raise TypeError("taints are not objects")
    capacities = parse_capacities(raw)
    shareable = bool(raw.get("allowMultipleAllocations"))
    return Device(
        id=(driver, pool, str(raw["name"])),
        node=node,
        capacities=capacities,
        shareable=shareable,
        model=models.get(shareable, capacities),
        attributes=qualified_attributes(driver, raw),
        taints=taints,
        variable=cel.device_variable(driver, raw),
    )


def _devices(
    driver: str, slices: list[Object], problems: list[str]
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
        except _MALFORMED as exc:
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
        found = _pool_devices(driver, current, models=models, problems=problems)
        if isinstance(found, str):
            unusable.setdefault(node, {})[pool] = found
            problems.append(f"pool {pool} on node {node} {found}: none of its cards is used")
            continue
        devices += found
    return devices, unusable


def _pool_devices(
    driver: str, slices: list[_Slice], *, models: Models, problems: list[str]
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
                devices.append(_device(driver, read.node, read.pool, raw, models))
            except _MALFORMED as exc:
                problems.append(f"ResourceSlice {read.name}: device {name}: {exc!s}")
    return devices
