"""Builders for engine tests: clusters of real cards and the plugin's slices, claims, pods."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpushare_simulator.harness.cluster import node_object

from dra_driver.api import DriverNames
from dra_driver.api.classes import default_device_classes, device_class
from dra_driver.engine import Placed, Snapshot
from dra_driver.nvml.inventory import Card, NodeInventory, Taint
from dra_driver.publishing.slices import desired_slices
from dra_driver.publishing.slicesync import with_generation

Object = dict[str, Any]

NAMES = DriverNames.for_driver("gpushare.dra.dev")
DRIVER = NAMES.driver
PCI = "resource.kubernetes.io/pciBusID"


def card(
    index: int,
    memory: str = "16Gi",
    *,
    product: str = "Tesla T4",
    driver_version: str = "535.161.08",
    node: str = "node",
) -> Card:
    """Build a card; UUID and PCI bus ID follow from the node and index."""
    return Card(
        uuid=f"GPU-{abs(hash((node, index))) % 10**8:08d}-0000-4000-8000-{index:012d}",
        product_name=product,
        memory_bytes=memory,  # type: ignore[arg-type]  # a quantity string is accepted
        pci_bus_id=f"0000:{index + 1:02x}:00.0",
        minor=index,
        index=index,
        architecture="Turing",
        cuda_compute_capability="7.5",
        driver_version=driver_version,
    )


def node(
    name: str,
    cards: Sequence[Card] | int = 1,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
) -> NodeInventory:
    """Build an inventory node with ``cards`` (a count: that many 16Gi T4s)."""
    if isinstance(cards, int):
        cards = [card(i, node=name) for i in range(cards)]
    return NodeInventory(
        name=name,
        cards=tuple(cards),
        labels=dict(labels or {}),
        taints=tuple(taints),
        unschedulable=unschedulable,
    )


def slices_of(nodes: Iterable[NodeInventory], *, shared: bool = True) -> list[Object]:
    """Return the slices the kubelet plugin would publish for these nodes (generation 1).

    ``shared=False``: the plain devices it publishes where the API server has no consumable
    capacity.
    """
    published = []
    for inventory in nodes:
        uid = f"uid-{inventory.name}"
        for index, desired in enumerate(
            desired_slices(NAMES, inventory.name, uid, inventory.cards, shared=shared)
        ):
            slice_ = with_generation(desired, 1)
            slice_["metadata"]["name"] = f"{inventory.name}-slice-{index}"
            published.append(slice_)
    return published


def cluster(
    *nodes: NodeInventory,
    claims: Iterable[Object] = (),
    classes: Iterable[Object] = (),
    slices: Iterable[Object] | None = None,
    share_plain: bool = True,
    taint_rules: Iterable[Object] = (),
) -> Snapshot:
    """Return a snapshot of nodes with the chart's classes plus ``classes``."""
    return Snapshot.build(
        NAMES,
        nodes=[node_object(n) for n in nodes],
        slices=slices_of(nodes) if slices is None else slices,
        classes=[*default_device_classes(NAMES), *classes],
        claims=claims,
        taint_rules=taint_rules,
        share_plain=share_plain,
    )


def selector_class(name: str, *expressions: str, config: Object | None = None) -> Object:
    """Return a DeviceClass of ours with extra CEL selectors."""
    made = device_class(name, NAMES)
    made["spec"]["selectors"] += [{"cel": {"expression": e}} for e in expressions]  # type: ignore[index]
    if config is not None:
        made["spec"]["config"] = [{"opaque": {"driver": DRIVER, "parameters": config}}]  # type: ignore[index]
    return made


def request(
    name: str = "gpu",
    *,
    cores: str | None = None,
    memory: str | None = None,
    device_class: str = DRIVER,
    count: int | None = None,
    all_devices: bool = False,
    selectors: Sequence[str] = (),
    tolerations: Sequence[Object] = (),
) -> Object:
    """Return an ``exactly`` request entry."""
    exactly: Object = {"deviceClassName": device_class}
    capacity = {k: v for k, v in (("cores", cores), ("memory", memory)) if v is not None}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    if count is not None:
        exactly["count"] = count
    if all_devices:
        exactly["allocationMode"] = "All"
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    return {"name": name, "exactly": exactly}


def first_available(name: str, *alternatives: Object) -> Object:
    """Return a ``firstAvailable`` request from ``request()`` entries, named as sub-requests."""
    return {
        "name": name,
        "firstAvailable": [{"name": a["name"], **a["exactly"]} for a in alternatives],
    }


_uids = itertools.count(1)


def config(**fields: str) -> Object:
    """Return GpuShareConfig parameters."""
    return {"apiVersion": NAMES.config_api_version, "kind": "GpuShareConfig", **fields}


def claim(
    name: str,
    *requests: Object,
    constraints: Sequence[Object] = (),
    configs: Sequence[Object] = (),
    namespace: str = "default",
) -> Object:
    """Return an unallocated ResourceClaim."""
    devices: Object = {"requests": list(requests) or [request()]}
    if constraints:
        devices["constraints"] = list(constraints)
    if configs:
        devices["config"] = [{"opaque": {"driver": DRIVER, "parameters": c}} for c in configs]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"00000000-0000-4000-8000-{next(_uids):012d}",
            "resourceVersion": "1",
        },
        "spec": {"devices": devices},
    }


def pod(name: str = "pod", **spec: Any) -> Object:
    """Return a Pod with extra ``spec`` fields (nodeSelector, tolerations, affinity)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"pod-{name}"},
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
    }


def share_ids() -> Any:
    """Return a deterministic share-ID generator."""
    counter = itertools.count(1)
    return lambda: f"11111111-2222-4333-8444-{next(counter):012d}"


def allocated(claims: Sequence[Object], placed: Placed) -> list[Object]:
    """Return the claims with the placement's allocation written into their status."""
    by_uid = {a.uid: a for a in placed.claims}
    out = []
    for c in claims:
        allocation = by_uid[c["metadata"]["uid"]].status("2026-01-01T00:00:00Z")
        out.append({**c, "status": {"allocation": allocation}})
    return out


def commit(snapshot: Snapshot, claims: Sequence[Object], placed: Placed) -> list[Object]:
    """Write the placement into the claims and count them in the snapshot."""
    written = allocated(claims, placed)
    for c in written:
        snapshot.update_claim(c)
    return written


def devices_of(placed: Placed) -> list[str]:
    """Return ``node/device`` of every result, in order."""
    return [f"{placed.node}/{r['device']}" for a in placed.claims for r in a.results]
