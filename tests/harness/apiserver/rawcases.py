"""Claim writes and what a real v1.36.2 API server answers to each, for the fake and the real.

A claim's opaque parameters are created sorted and compact (kubectl), unsorted and compact, or
spaced (the Python client's JSON); then a finalizer is added by each write type. The real
server keeps the bytes sent and refuses a spec whose bytes changed ("field is immutable").
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

MERGE = "application/merge-patch+json"
SORTED = {"a": {"x": 3, "y": 2}, "b": 1}
UNSORTED = {"b": 1, "a": {"y": 2, "x": 3}}
FINALIZER = "example.com/hold"


def read(
    resource_api: client.ResourceV1Api, name: str, namespace: str = "default"
) -> dict[str, Any]:
    """Return the claim as the server shows it, parsed from its JSON."""
    response = resource_api.read_namespaced_resource_claim(name, namespace, _preload_content=False)
    body: dict[str, Any] = json.loads(response.data)
    return body


def write(
    resource_api: client.ResourceV1Api, name: str, how: str, namespace: str = "default"
) -> None:
    """Add a finalizer with one write type, through the Python client."""
    if how == "put":
        body = read(resource_api, name, namespace)
        body["metadata"]["finalizers"] = [FINALIZER]
        resource_api.replace_namespaced_resource_claim(name, namespace, body)
    elif how == "json":
        operation = {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}
        resource_api.patch_namespaced_resource_claim(name, namespace, [operation])
    elif how == "merge":
        patch = {"metadata": {"finalizers": [FINALIZER]}}
        resource_api.patch_namespaced_resource_claim(name, namespace, patch, _content_type=MERGE)
    else:
        patch = {"metadata": {"finalizers": [FINALIZER]}}
        resource_api.patch_namespaced_resource_claim(name, namespace, patch)


MATRIX = [
    ("sorted-compact", "put", False),
    ("sorted-compact", "json", True),
    ("sorted-compact", "merge", True),
    ("sorted-compact", "strategic", True),
    ("unsorted-compact", "put", False),
    ("unsorted-compact", "json", True),
    ("unsorted-compact", "merge", True),
    ("unsorted-compact", "strategic", False),
    ("spaced", "put", True),
    ("spaced", "json", False),
    ("spaced", "merge", False),
    ("spaced", "strategic", False),
]
