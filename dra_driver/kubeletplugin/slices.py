"""What a node's ResourceSlices should contain, and the writes that get them there.

One shareable device per healthy card (docs/resource-model.md lists its attributes and
capacities), and :func:`plan_sync`, which applies Kubernetes' pool rules: consumers use only a
pool's slices at its highest generation, and ``resourceSliceCount`` says how many there are at
that generation, so a change to one slice may be made in place while any other change needs a
new generation written on every slice. Pure functions, no I/O: the
:class:`~dra_driver.kubeletplugin.publisher.SlicePublisher` reads and writes. Every value is
written in the canonical form the API server stores (``80Gi``, ``100``), so comparing what we
want with what is stored needs no parsing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from dra_driver.api import DriverNames
from dra_driver.api.fields import CORES, MEMORY, MIB
from dra_driver.k8s.quantity import QuantityFormat, format_quantity
from dra_driver.nvml.inventory import Card, Health

Object = dict[str, Any]

API_VERSION: Final = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE: Final = 128  # v1 limit for devices without taints or counters
PCI_BUS_ID_ATTRIBUTE: Final = "resource.kubernetes.io/pciBusID"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"

_MAX_STRING_ATTRIBUTE: Final = 64
_MAX_LABEL_VALUE: Final = 63
# The API server appends 5 random characters to generateName and cuts a longer prefix to 58.
_MAX_GENERATE_NAME: Final = 58
_SEMVER: Final = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
_VERSION_LIKE: Final = re.compile(r"v?(?P<numbers>\d+(?:\.\d+)*)(?P<suffix>[-+].*)?")


def device_name(card: Card) -> str:
    """Return the card's device name in the pool: ``gpu-<minor>``, stable across reboots."""
    return f"gpu-{card.minor}"


def node_label(names: DriverNames) -> str:
    """Return the label key that names the node a slice belongs to."""
    return f"{names.driver}/node"


def to_semver(text: str) -> str | None:
    """Return ``text`` as a semantic version for a ``version`` attribute, or ``None``.

    NVML reports ``"8.0"`` and ``"535.104.05"``; semver needs three numbers without leading
    zeros, so they become ``8.0.0`` and ``535.104.5``. A fourth and later numbers go into build
    metadata (``1.2.3.4`` → ``1.2.3+4``), which ordering ignores. Text that cannot be read as a
    version gives ``None``: publishing it would make the API server refuse the whole slice.
    """
    match = _VERSION_LIKE.fullmatch(text.strip())
    if match is None:
        return None
    numbers = [int(part) for part in match["numbers"].split(".")]
    major, minor, patch = (*numbers, 0, 0)[:3]
    version = f"{major}.{minor}.{patch}{match['suffix'] or ''}"
    extra = ".".join(str(n) for n in numbers[3:])
    if extra:
        version += f".{extra}" if "+" in version else f"+{extra}"
    if len(version) > _MAX_STRING_ATTRIBUTE or not _SEMVER.fullmatch(version):
        return None
    return version


def published_memory(card: Card) -> int:
    """Return the memory the card's device offers: its bytes rounded down to a whole MiB.

    Memory shares are requested on a 1Mi grid (``validRange {min 1Mi, step 1Mi}``) and the
    scheduler rounds every request up to that grid, so a value off the grid could never be
    handed out whole: the default (the whole card) would round up past the capacity and a
    whole-card claim would fit nowhere. Rounding down also never promises memory the card
    lacks, and a MiB multiple is written canonically with a binary suffix (``80Gi``).
    """
    return card.shareable_memory_bytes


def card_device(card: Card, names: DriverNames, *, shared: bool = True) -> Object:  # noqa: ARG001
    """Return the ResourceSlice v1 device of one card.

    Attribute and capacity names carry no domain, so they are in the driver's own domain (CEL:
    ``device.attributes["<driver>"].uuid``); ``names`` is taken so that every builder has the
    same inputs, even though no name here needs qualifying. ``shared=False`` gives the plain
    device of a cluster without consumable capacity: its capacity values, but neither
    ``allowMultipleAllocations`` nor request policies (which such an API server drops), so
    that a claim gets the card whole.
    """
    attributes: Object = {
        "uuid": {"string": card.uuid},
        "productName": {"string": card.product_name[:_MAX_STRING_ATTRIBUTE]},
        "architecture": {"string": card.architecture[:_MAX_STRING_ATTRIBUTE]},
    }
    for name, text in (
        ("cudaComputeCapability", card.cuda_compute_capability),
        ("driverVersion", card.driver_version),
    ):
        version = to_semver(text)
        if version is not None:
            attributes[name] = {"version": version}
    attributes["index"] = {"int": card.index}
    attributes["minor"] = {"int": card.minor}
    attributes[PCI_BUS_ID_ATTRIBUTE] = {"string": card.pci_bus_id}
    if card.numa_node is not None and card.numa_node >= 0:
        attributes["numaNode"] = {"int": card.numa_node}
    memory = format_quantity(published_memory(card), QuantityFormat.BINARY)
    capacity: Object = {
        CORES: {"value": "100"},
        MEMORY: {"value": memory},
    }
    device: Object = {"name": device_name(card), "attributes": attributes, "capacity": capacity}
    if shared:
        device["allowMultipleAllocations"] = True
        capacity[CORES]["requestPolicy"] = {
            "default": "100",
            "validRange": {"min": "0", "max": "100", "step": "1"},
        }
        capacity[MEMORY]["requestPolicy"] = {
            "default": memory,
            "validRange": {"min": "1Mi", "step": "1Mi"},
        }
    return device


def _bus_order(card: Card) -> tuple[tuple[int, ...], int]:
    """Sort key: the PCI bus ID numerically (domain, bus, device, function), then the minor."""
    parts = re.split(r"[:.]", card.pci_bus_id)
    try:
        return tuple(int(part, 16) for part in parts), card.minor
    except ValueError:  # Card normalises the ID, so this is only a safety net
        return (), card.minor


def usable_cards(cards: Sequence[Card]) -> list[Card]:
    """Return the cards that may be allocated, in PCI bus order.

    Unhealthy cards are left out: a device in a slice can be allocated, and a broken card must
    not be. A card with less than 1Mi of memory could not serve the smallest share.
    """
    usable = [c for c in cards if c.health is Health.HEALTHY and published_memory(c) >= MIB]
    return sorted(usable, key=_bus_order)


def _label_value(text: str) -> str:
    """Return ``text`` as a label value: cut to 63 characters with a hash keeping it unique."""
    if len(text) <= _MAX_LABEL_VALUE:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{text[: _MAX_LABEL_VALUE - 11].rstrip('-_.')}-{digest}"


def slice_labels(names: DriverNames, node_name: str) -> dict[str, str]:
    """Return the labels of the node's slices: who manages them and for which node."""
    return {MANAGED_BY_LABEL: names.driver, node_label(names): _label_value(node_name)}


def generate_name(names: DriverNames, node_name: str) -> str:
    """Return ``<node>-<driver>-``, cut so the server never has to shorten it.

    The cut keeps the prefix a valid name start: no ``.`` or ``-`` right before the final dash.
    """
    base = f"{node_name}-{names.driver}"[: _MAX_GENERATE_NAME - 1]
    return f"{base.rstrip('.-')}-"


def desired_slices(
    names: DriverNames,
    node_name: str,
    node_uid: str,
    cards: Sequence[Card],
    *,
    max_devices: int = MAX_DEVICES_PER_SLICE,
    shared: bool = True,
) -> list[Object]:
    """Return the node's slices for ``cards``: healthy cards in PCI bus order, chunked.

    Each slice holds at most ``max_devices`` devices; with no usable card there is exactly
    one slice without devices, which shows the driver is alive. ``spec.pool.generation`` is 0:
    the publisher sets it. ``shared`` chooses shareable or plain devices (:func:`card_device`).
    The same input always gives the same output.
    """
    if not 1 <= max_devices <= MAX_DEVICES_PER_SLICE:
        raise ValueError(f"max_devices must be 1 to {MAX_DEVICES_PER_SLICE}, got {max_devices}")
    devices = [card_device(card, names, shared=shared) for card in usable_cards(cards)]
    chunks = [devices[i : i + max_devices] for i in range(0, len(devices), max_devices)] or [[]]
    owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node_name,
        "uid": node_uid,
        "controller": True,
    }
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": generate_name(names, node_name),
                "labels": slice_labels(names, node_name),
                "ownerReferences": [dict(owner)],
            },
            "spec": {
                "driver": names.driver,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": 0, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        }
        for chunk in chunks
    ]


# -- from the current slices to the desired ones ---------------------------------------------


def slice_name(obj: Object) -> str:
    """Return the object's name."""
    return str(obj["metadata"]["name"])


def _pool(obj: Object) -> Object:
    pool: Object = obj.get("spec", {}).get("pool") or {}
    return pool


def _generation(obj: Object) -> int:
    return int(_pool(obj).get("generation") or 0)


def with_generation(slice_: Object, generation: int) -> Object:
    """Return ``slice_`` with ``spec.pool.generation`` set."""
    spec = slice_["spec"]
    return {**slice_, "spec": {**spec, "pool": {**spec["pool"], "generation": generation}}}


def _covers(want: object, have: object) -> bool:
    """Whether ``have`` holds everything in ``want``; fields the server added are ignored.

    An empty list or map in ``want`` matches a missing field, as the server omits empty ones.
    """
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        return all(
            _covers(value, have[key]) if key in have else value in ([], {})
            for key, value in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(_covers(w, h) for w, h in zip(want, have, strict=True))
        )
    return want == have


def _up_to_date(current: Object, want: Object) -> bool:
    meta, wanted = current.get("metadata", {}), want["metadata"]
    return (
        _covers(want["spec"], current.get("spec"))
        and _covers(wanted["labels"], meta.get("labels") or {})
        and meta.get("ownerReferences") == wanted["ownerReferences"]
    )


def keeps_capacity(sent: Object, stored: Object) -> bool:
    """Whether the server kept ``allowMultipleAllocations`` and every ``requestPolicy`` sent.

    Plain devices (sent without them) say nothing either way.
    """
    stored_devices = {d.get("name"): d for d in stored.get("spec", {}).get("devices") or []}
    for device in sent["spec"].get("devices") or []:
        if not device.get("allowMultipleAllocations"):
            continue
        got = stored_devices.get(device["name"])
        if got is None or got.get("allowMultipleAllocations") is not True:
            return False
        for name, capacity in device.get("capacity", {}).items():
            if "requestPolicy" in capacity and "requestPolicy" not in got.get("capacity", {}).get(
                name, {}
            ):
                return False
    return True


def _device_names(obj: Object) -> set[str]:
    return {str(d.get("name")) for d in obj.get("spec", {}).get("devices") or []}


def _match(current: list[Object], desired: list[Object]) -> list[tuple[Object | None, Object]]:
    """Pair each desired slice with the current slice holding the same or most devices."""
    free = list(current)
    pairs: list[tuple[Object | None, Object] | None] = [None] * len(desired)
    for i, want in enumerate(desired):
        same = next((c for c in free if _device_names(c) == _device_names(want)), None)
        if same is not None:
            free.remove(same)
            pairs[i] = (same, want)
    for i, want in enumerate(desired):
        if pairs[i] is None:
            best = max(
                free, key=lambda c: len(_device_names(c) & _device_names(want)), default=None
            )
            if best is not None:
                free.remove(best)
            pairs[i] = (best, want)
    return [pair for pair in pairs if pair is not None]


@dataclass
class SyncPlan:
    """The writes that turn the current slices into the desired ones."""

    generation: int
    delete_first: list[Object] = field(default_factory=list)
    update: list[tuple[Object, Object]] = field(default_factory=list)
    create: list[Object] = field(default_factory=list)
    delete_last: list[Object] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether nothing needs writing."""
        return not (self.delete_first or self.update or self.create or self.delete_last)


def plan_sync(
    actual: Sequence[Object], desired: Sequence[Object], pool_name: str, last_generation: int
) -> SyncPlan:
    """Decide the writes by the pool rules above; ``last_generation`` is the highest we wrote.

    Slices of older generations or other pools are deleted first. If the slice count is
    unchanged and at most one slice differs, that one is updated in place; otherwise the
    generation becomes max(existing, ours) + 1 and every slice is written at it, reusing the
    current objects where possible, and the current slices not reused are deleted last.
    """
    ours = [s for s in actual if _pool(s).get("name") == pool_name]
    top = max((_generation(s) for s in ours), default=0)
    current = sorted((s for s in ours if _generation(s) == top), key=slice_name)
    current_names = {slice_name(s) for s in current}
    obsolete = [s for s in actual if slice_name(s) not in current_names]
    pairs = _match(current, list(desired))
    changed = [(c, w) for c, w in pairs if c is None or not _up_to_date(c, with_generation(w, top))]
    if current and len(current) == len(desired) and len(changed) <= 1 and top >= last_generation:
        updates = [(c, with_generation(w, top)) for c, w in changed if c is not None]
        return SyncPlan(top, delete_first=obsolete, update=updates)
    generation = max(top, last_generation) + 1
    reused = {slice_name(c) for c, _ in pairs if c is not None}
    return SyncPlan(
        generation,
        delete_first=obsolete,
        update=[(c, with_generation(w, generation)) for c, w in pairs if c is not None],
        create=[with_generation(w, generation) for c, w in pairs if c is None],
        delete_last=[c for c in current if slice_name(c) not in reused],
    )
