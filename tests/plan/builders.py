"""Workload documents and a one-call plan, for the plan tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from gpushare_simulator.harness.apiserver import FakeApiServer

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames, Placement
from dra_driver.api.classes import default_device_classes
from dra_driver.nvml.inventory import builtin_inventory
from dra_driver.plan.inventory import inventory_cluster, node_object, node_slices
from dra_driver.plan.planner import Plan, make_plan
from dra_driver.plan.workload import parse_workload

Object = dict[str, Any]

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
EXAMPLE: Final = Path(__file__).resolve().parents[2] / "deploy/examples/plan/scenarios.yaml"
BOTH: Final = (Placement.BINPACK, Placement.SPREAD)


def template(
    name: str,
    *,
    device_class: str = NAMES.default_device_class,
    cores: str | None = None,
    memory: str | None = None,
) -> Object:
    """Return a ResourceClaimTemplate for one card (a share when cores or memory is given)."""
    requests = {k: v for k, v in (("cores", cores), ("memory", memory)) if v is not None}
    exactly: Object = {"deviceClassName": device_class}
    if requests:
        exactly["capacity"] = {"requests": requests}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def claim(name: str, *, cores: str, memory: str) -> Object:
    """Return a ResourceClaim for one share, to be shared by the pods that name it."""
    spec = template(name, cores=cores, memory=memory)["spec"]["spec"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod_spec(
    templates: Sequence[str] = (), *, claims: Sequence[str] = (), node: str | None = None
) -> Object:
    """Return a pod spec with one claim entry per template (``gpu``, ``gpu1``…) and claim."""
    entries = [
        {"name": f"gpu{i or ''}", "resourceClaimTemplateName": name}
        for i, name in enumerate(templates)
    ] + [{"name": f"shared{i or ''}", "resourceClaimName": name} for i, name in enumerate(claims)]
    spec: Object = {"containers": [{"name": "main", "image": "example"}]}
    if entries:
        spec["resourceClaims"] = entries
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return spec


def pod(name: str, *templates: str, claims: Sequence[str] = (), node: str | None = None) -> Object:
    """Return a bare Pod using ``templates`` and the shared ``claims``."""
    spec = pod_spec(templates, claims=claims, node=node)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def deployment(name: str, replicas: int, *templates: str, node: str | None = None) -> Object:
    """Return a Deployment of ``replicas`` pods using ``templates``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {"spec": pod_spec(templates, node=node)},
        },
    }


def dump(*documents: Object) -> str:
    """Return the documents as one multi-document YAML text."""
    return yaml.safe_dump_all(documents, sort_keys=False)


def plan_of(
    text: str, *, inventory: str = "qgpu-runbook", policies: Sequence[Placement] = BOTH
) -> Plan:
    """Plan the workload ``text`` on a built-in inventory."""
    cluster = inventory_cluster(NAMES, builtin_inventory(inventory), f"inventory {inventory}")
    return make_plan(NAMES, cluster, parse_workload(text, "work.yaml"), policies)


def serve_runbook(server: FakeApiServer) -> None:
    """Create qgpu-runbook's nodes, their slices and the chart's classes on ``server``."""
    for node in builtin_inventory("qgpu-runbook").nodes:
        server.create(node_object(node))
        for slice_ in node_slices(NAMES, node):
            server.create(slice_)
    for device_class in default_device_classes(NAMES):
        server.create(device_class)
