"""Objects for the operator-command tests: a cluster with one node's cards and some claims."""

from __future__ import annotations

from typing import Any

from gpushare_simulator.harness.apiserver import FakeApiServer

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.nvml.inventory import builtin_inventory
from dra_driver.plan.inventory import node_object, node_slices

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
SHARE_ID = "7d3f1c2a-0000-4000-8000-000000000001"
Object = dict[str, Any]


def seed_cards(server: FakeApiServer) -> None:
    """Create qgpu-runbook's nodes and this driver's slices (node-1: one T4, node-2: two)."""
    for node in builtin_inventory("qgpu-runbook").nodes:
        server.create(node_object(node))
        for slice_ in node_slices(NAMES, node):
            server.create(slice_)


def claim(
    name: str,
    *,
    finalizers: tuple[str, ...] = (),
    results: list[Object] | None = None,
    pods: tuple[str, ...] = (),
) -> Object:
    """Return a claim of the default class, allocated with ``results`` when given."""
    body: Object = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "finalizers": list(finalizers)},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": NAMES.default_device_class}}
                ]
            }
        },
    }
    if results is not None:
        body["status"] = {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-2"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [
                {"resource": "pods", "name": pod, "uid": f"00000000-0000-4000-8000-00000000000{i}"}
                for i, pod in enumerate(pods)
            ],
        }
    return body


def share(device: str, cores: str, memory: str, share_id: str = SHARE_ID) -> Object:
    """Return an allocation result for a share of node-2's ``device``."""
    return {
        "request": "gpu",
        "driver": NAMES.driver,
        "pool": "node-2",
        "device": device,
        "shareID": share_id,
        "consumedCapacity": {"cores": cores, "memory": memory},
    }


def whole(device: str) -> Object:
    """Return an allocation result holding node-2's ``device`` whole."""
    return {"request": "gpu", "driver": NAMES.driver, "pool": "node-2", "device": device}


def pod(
    name: str,
    *,
    gates: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    claim_name: str | None = None,
) -> Object:
    """Return a pod, gated by ``gates``, using ``claim_name`` when given."""
    spec: Object = {"containers": [{"name": "main", "image": "busybox"}]}
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    if claim_name:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }
