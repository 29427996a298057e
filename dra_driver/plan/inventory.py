"""A cluster from a fake GPU inventory: the Nodes and the slices the kubelet plugin would publish.

The slices come from :func:`~dra_driver.publishing.slices.desired_slices`, the function the
plugin itself publishes, so a plan sees exactly the devices a real node with those cards
offers. The DeviceClasses are the ones the chart installs.

For a plan, an inventory file may also list the cluster's GpuShareQuotas, as the objects
``kubectl apply`` would create (the namespace defaults to ``default``)::

    quotas:
    - apiVersion: gpushare.dra.dev/v1alpha1
      kind: GpuShareQuota
      metadata: {name: gpu, namespace: team-a}
      spec: {hard: {cores: "150", memory: 40Gi}, priority: offline}

They are checked as the driver reads them; an error names the file and the field
(``inv.yaml: quotas[0].spec.priorty: unknown field; allowed fields: hard, priority``). The
rest of the file is the inventory format of :mod:`dra_driver.nvml.inventory`, whose errors keep
their line numbers.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Final

import yaml

from dra_driver.api import QUOTA_KIND, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.k8s.names import LABEL_RULE, SUBDOMAIN_RULE, is_dns_label, is_dns_subdomain
from dra_driver.k8s.objects import Object
from dra_driver.nvml.inventory import (
    BUILTIN_INVENTORIES,
    Inventory,
    InventoryError,
    NodeInventory,
    builtin_inventory,
    load_inventory,
    parse_inventory,
)
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.errors import PlanInputError
from dra_driver.plan.workload import DEFAULT_NAMESPACE
from dra_driver.publishing.slices import desired_slices
from dra_driver.publishing.slicesync import with_generation
from dra_driver.quota import QuotaSpecError, parse_quota

# Fixed, so the same inventory always yields the same node UIDs (slices name them as owners).
_NODE_UID_NAMESPACE: Final = uuid.UUID("0b7c6f5e-4d1a-4f3e-9a55-2f1c8e6d9b30")
QUOTAS: Final = "quotas"
"""The inventory file's field of GpuShareQuotas (read by ``plan`` only)."""
_QUOTA_FIELDS: Final = ("apiVersion", "kind", "metadata", "spec")
_QUOTA_SPEC_FIELDS: Final = ("hard", "priority")


def node_object(node: NodeInventory) -> Object:
    """Build the Node object the cluster registers for an inventory node."""
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", **node.labels}
    spec: Object = {}
    if node.taints:
        spec["taints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect}
            if t.value
            else {"key": t.key, "effect": t.effect}
            for t in node.taints
        ]
    if node.unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": spec,
    }


def node_slices(names: DriverNames, node: NodeInventory, *, shared: bool = True) -> list[Object]:
    """Return the node's slices as the API server would store them: named, generation 1.

    ``shared=False``: the whole-only devices a plugin publishes on 1.34/1.35 without consumable
    capacity, where device taints are off too, so unhealthy cards are left out; with both (1.36
    on) an unhealthy card is published with the plugin's default ``NoSchedule`` taint.
    """
    node_uid = str(uuid.uuid5(_NODE_UID_NAMESPACE, node.name))
    slices = []
    unhealthy = "NoSchedule" if shared else None
    published = desired_slices(
        names, node.name, node_uid, node.cards, shared=shared, unhealthy=unhealthy
    )
    for index, slice_ in enumerate(published):
        stored = with_generation(slice_, 1)
        metadata = stored["metadata"]
        stored["metadata"] = {**metadata, "name": f"{metadata['generateName']}{index}"}
        slices.append(stored)
    return slices


def read_inventory(given: str) -> tuple[Inventory, str]:
    """Load ``given``, a file or else a built-in inventory name; return it and its description.

    Raise :class:`PlanInputError` when it is neither, or when the file is refused.
    """
    path = Path(given)
    try:
        if path.exists():
            return load_inventory(path), f"inventory {given}"
        if given in BUILTIN_INVENTORIES:
            return builtin_inventory(given), f"built-in inventory {given}"
    except InventoryError as exc:
        raise PlanInputError(str(exc)) from None
    raise PlanInputError(
        f"--inventory {given}: no such file, and not a built-in inventory "
        f"({', '.join(BUILTIN_INVENTORIES)})"
    )


def read_plan_inventory(
    given: str, names: DriverNames
) -> tuple[Inventory, str, tuple[Object, ...]]:
    """Return :func:`read_inventory`'s inventory and description, and the file's quotas.

    Raise :class:`PlanInputError` naming the file and the field for a quota that is not one.
    """
    path = Path(given)
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        text = None  # read_inventory says why
    if text is None:
        return (*read_inventory(given), ())
    source = str(path)
    inventory_text, quotas = _split_quotas(text, source)
    try:
        inventory = parse_inventory(inventory_text, source)
    except InventoryError as exc:
        raise PlanInputError(str(exc)) from None
    return inventory, f"inventory {given}", _checked_quotas(quotas, source, names)


def _split_quotas(text: str, source: str) -> tuple[str, object]:
    """Return ``text`` with its top-level ``quotas`` blanked out (lines kept), and the value.

    Anything that is not a YAML mapping is left to the inventory's decoder to refuse.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return text, None
    if not isinstance(root, yaml.MappingNode):
        return text, None
    found = [(k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == QUOTAS]
    if not found:
        return text, None
    if len(found) > 1:
        raise PlanInputError(f"{source}: {QUOTAS}: duplicate field; it may appear only once")
    key, value = found[0]
    start, end = key.start_mark.index, value.end_mark.index
    if root.flow_style and (comma := re.match(r"\s*,", text[end:])):
        end += comma.end()
    blank = re.sub(r"[^\n]", " ", text[start:end])
    return text[:start] + blank + text[end:], yaml.SafeLoader("").construct_document(value)


def _checked_quotas(value: object, source: str, names: DriverNames) -> tuple[Object, ...]:
    """Return the file's quotas as the API server would store them; refuse what is not one."""

    def fail(field: str, problem: str) -> PlanInputError:
        return PlanInputError(f"{source}: {field}: {problem}")

    def only(obj: dict[object, object], at: str, allowed: tuple[str, ...]) -> None:
        for key in obj:
            if key not in allowed:
                raise fail(f"{at}.{key}", f"unknown field; allowed fields: {', '.join(allowed)}")

    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail(QUOTAS, f"expected a list of {QUOTA_KIND} objects")
    found: dict[tuple[str, str], int] = {}
    quotas = []
    for index, item in enumerate(value):
        at = f"{QUOTAS}[{index}]"
        if not isinstance(item, dict):
            raise fail(at, f"expected a {QUOTA_KIND} object")
        only(item, at, _QUOTA_FIELDS)
        for field, wanted in (("apiVersion", names.quota_api_version), ("kind", QUOTA_KIND)):
            if item.get(field) != wanted:
                raise fail(f"{at}.{field}", f"expected {wanted}, got {item.get(field)!r}")
        metadata, spec = item.get("metadata"), item.get("spec")
        if not isinstance(metadata, dict):
            raise fail(f"{at}.metadata", "expected an object with a name")
        name, namespace = metadata.get("name"), metadata.get("namespace") or DEFAULT_NAMESPACE
        if not isinstance(name, str) or not is_dns_subdomain(name):
            raise fail(f"{at}.metadata.name", f"{name!r} is not {SUBDOMAIN_RULE}")
        if not isinstance(namespace, str) or not is_dns_label(namespace):
            raise fail(f"{at}.metadata.namespace", f"{namespace!r} is not {LABEL_RULE}")
        if not isinstance(spec, dict):
            raise fail(f"{at}.spec", "expected an object with hard")
        only(spec, f"{at}.spec", _QUOTA_SPEC_FIELDS)
        quota = {**item, "metadata": {"name": name, "namespace": namespace}}
        try:
            parse_quota(quota)
        except QuotaSpecError as exc:
            raise fail(at, str(exc)) from None
        if (namespace, name) in found:
            first = f"{QUOTAS}[{found[namespace, name]}]"
            problem = f"a second {QUOTA_KIND} {namespace}/{name} (the first is {first})"
            raise fail(f"{at}.metadata.name", problem)
        found[namespace, name] = index
        quotas.append(quota)
    return tuple(quotas)


def inventory_cluster(
    names: DriverNames,
    inventory: Inventory,
    source: str,
    *,
    shared: bool = True,
    quotas: tuple[Object, ...] = (),
) -> ClusterObjects:
    """Return the cluster the inventory describes, with no claims allocated yet."""
    return ClusterObjects(
        source=source if shared else f"{source}, without consumable capacity",
        nodes=tuple(node_object(node) for node in inventory.nodes),
        slices=tuple(
            s for node in inventory.nodes for s in node_slices(names, node, shared=shared)
        ),
        classes=tuple(default_device_classes(names)),
        quotas=quotas,
    )
