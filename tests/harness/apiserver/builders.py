"""Object builders and raw-request helpers shared by the fake API server tests."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client

DRIVER = "gpushare.dra.dev"
SHARE_ID = "6f0c4b9e-1f2a-4c3b-9d8e-7a6b5c4d3e2f"


def device(index: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "allowMultipleAllocations": True,
        "attributes": {"index": {"int": index}, "uuid": {"string": f"GPU-{index:04d}"}},
        "capacity": {
            "cores": {
                "value": "100",
                "requestPolicy": {
                    "default": "100",
                    "validRange": {"min": "0", "max": "100", "step": "1"},
                },
            },
            "memory": {"value": "80Gi"},
        },
        **extra,
    }


def resource_slice(name: str, node: str, devices: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [device(i) for i in range(devices)],
            **spec,
        },
    }


def claim(name: str, namespace: str = "default", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "capacity": {"requests": {"cores": "30", "memory": "5Gi"}},
                        },
                    }
                ]
            }
        },
    }


def allocation(device_name: str = "gpu-0", pool: str = "n1") -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": DRIVER,
                    "pool": pool,
                    "device": device_name,
                    "shareID": SHARE_ID,
                    "consumedCapacity": {"cores": "30", "memory": "5Gi"},
                }
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool]}]}
            ]
        },
    }


def pod(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "demo"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def raw(
    api_client: client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, Any, dict[str, str]]:
    """Send a request the typed API cannot (unknown fields, odd paths); return status and body."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    serialized = api_client.param_serialize(method, path, header_params=headers, body=body)
    response = api_client.call_api(*serialized[:4])
    response.read()
    text = response.data.decode() if response.data else ""
    try:
        payload = json.loads(text) if text else None
    except json.JSONDecodeError:
        payload = text
    return response.status, payload, dict(response.getheaders())


def with_config(obj: dict[str, Any], parameters: object) -> dict[str, Any]:
    """Give a claim (or a template's claim spec) one opaque config of ``parameters``."""
    devices = obj.setdefault("spec", {}).setdefault("devices", {})
    devices["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": parameters}}
    ]
    return obj


def send(
    server: FakeApiServer,
    method: str,
    path: str,
    body: bytes | None = None,
    content_type: str = "application/json",
) -> tuple[int, str]:
    """Send exact bytes (the typed client always re-serializes); return status and body text."""
    address = urlsplit(server.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)
    try:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()
