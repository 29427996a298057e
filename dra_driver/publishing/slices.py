"""What a node's ResourceSlices should contain.

One shareable device per card (docs/resource-model.md lists its attributes and capacities);
an unhealthy card is published with a taint where the API server keeps taints, and left out
where it does not. Pure functions, no I/O: :mod:`dra_driver.publishing.slicesync` plans the
writes and the :class:`~dra_driver.kubeletplugin.publisher.SlicePublisher` makes them. Every
value is written in the canonical form the API server stores (``80Gi``, ``100``), so comparing
what we want with what is stored needs no parsing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final

from dra_driver.api import DriverNames
from dra_driver.api.fields import CORES, MEMORY, MIB
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import QuantityFormat, format_quantity
from dra_driver.nvml.card import Card, Health

API_VERSION: Final = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE: Final = 128  # v1 limit for devices without taints or counters
MAX_TAINTED_DEVICES_PER_SLICE: Final = 64  # the limit once any device of the slice has taints
UNHEALTHY_TAINT_EFFECTS: Final = ("NoSchedule", "NoExecute")
"""Effects an unhealthy card's taint may have: keep new claims off it, or evict its pods too."""
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
_XID: Final = re.compile(r"\bXID\s*(\d+)", re.IGNORECASE)


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


def unhealthy_taint_key(names: DriverNames) -> str:
    """Return the key of the taint an unhealthy card carries: ``<driver>/unhealthy``."""
    return f"{names.driver}/unhealthy"


def unhealthy_taint(card: Card, names: DriverNames, effect: str) -> Object:
    """Return the taint of an unhealthy card; its value says why, as a label value can.

    ``xid-<n>`` for a fatal XID, ``ecc`` for a double-bit ECC error, ``unhealthy`` for
    anything else (a lost card, health events that cannot be watched). ``timeAdded`` is left to
    the API server, which sets it when it first stores the taint.
    """
    message = card.health_message or ""
    xid = _XID.search(message)
    if xid is not None:
        value = f"xid-{int(xid[1])}"
    elif "ECC" in message.upper():
        value = "ecc"
    else:
        value = "unhealthy"
    return {"key": unhealthy_taint_key(names), "value": value, "effect": effect}


def card_device(
    card: Card, names: DriverNames, *, shared: bool = True, unhealthy: str | None = None
) -> Object:
    """Return the ResourceSlice v1 device of one card.

    Attribute and capacity names carry no domain, so they are in the driver's own domain (CEL:
    ``device.attributes["<driver>"].uuid``). ``shared=False`` gives the plain device of a
    cluster without consumable capacity: its capacity values, but neither
    ``allowMultipleAllocations`` nor request policies (which such an API server drops), so
    that a claim gets the card whole. ``unhealthy``: the effect of the taint an unhealthy card
    carries (one of :data:`UNHEALTHY_TAINT_EFFECTS`).
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
    if card.health is not Health.HEALTHY and unhealthy is not None:
        device["taints"] = [unhealthy_taint(card, names, unhealthy)]
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


def usable_cards(cards: Sequence[Card], *, tainted: bool = False) -> list[Card]:
    """Return the cards to publish, in PCI bus order.

    Unhealthy cards are left out unless ``tainted`` (they are published with a taint that keeps
    claims off them): an untainted device in a slice can be allocated, and a broken card must
    not be. A card with less than 1Mi of memory could not serve the smallest share.
    """
    usable = [
        c for c in cards if (tainted or c.health is Health.HEALTHY) and published_memory(c) >= MIB
    ]
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
    unhealthy: str | None = None,
) -> list[Object]:
    """Return the node's slices for ``cards`` in PCI bus order, chunked.

    Each slice holds at most ``max_devices`` devices (64 once a device has a taint); with no
    usable card there is exactly one slice without devices, which shows the driver is alive.
    ``spec.pool.generation`` is 0: the publisher sets it. ``shared`` chooses shareable or plain
    devices; ``unhealthy`` is the effect of an unhealthy card's taint, or ``None`` where the API
    server drops taints: then unhealthy cards are left out (:func:`card_device`). The same
    input always gives the same output.
    """
    if not 1 <= max_devices <= MAX_DEVICES_PER_SLICE:
        raise ValueError(f"max_devices must be 1 to {MAX_DEVICES_PER_SLICE}, got {max_devices}")
    if unhealthy is not None and unhealthy not in UNHEALTHY_TAINT_EFFECTS:
        raise ValueError(f"unhealthy must be one of {UNHEALTHY_TAINT_EFFECTS}, got {unhealthy!r}")
    published = usable_cards(cards, tainted=unhealthy is not None)
    devices = [card_device(c, names, shared=shared, unhealthy=unhealthy) for c in published]
    if any("taints" in device for device in devices):
        max_devices = min(max_devices, MAX_TAINTED_DEVICES_PER_SLICE)
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
