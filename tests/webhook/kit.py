"""Builders for webhook tests: classes, claims, pods, reviews, a fake cluster, certificates."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.kit import card, node, slices_of
from gpushare_simulator.harness.certs import write_self_signed

from dra_driver.api import DriverNames
from dra_driver.api.classes import default_device_classes, device_class
from dra_driver.quota import Quota
from dra_driver.validation.capacity import Limits, limits_from_slices

Object = dict[str, Any]

NAMES = DriverNames.for_driver("gpushare.dra.dev")
DRIVER = NAMES.driver
API_VERSION = NAMES.config_api_version
GATE = NAMES.scheduling_gate
NVIDIA = "gpu.nvidia.com"
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"

# Two nodes: four 16Gi cards on one, two 80Gi cards on the other.
SLICES = slices_of([
    node("node-a", 4),
    node("node-b", [card(0, "80Gi", node="node-b"), card(1, "80Gi", node="node-b")]),
])  # fmt: skip
LIMITS = limits_from_slices(SLICES)


def classes() -> dict[str, Object]:
    """Return our chart's classes, an MPS class of ours, one with a broken config, NVIDIA's."""
    mps = device_class(f"mps.{DRIVER}", NAMES)
    mps["spec"]["config"] = [
        {"opaque": {"driver": DRIVER, "parameters": config(backend="mps")["opaque"]["parameters"]}}
    ]
    broken = device_class(f"broken.{DRIVER}", NAMES)
    broken["spec"]["config"] = [{"opaque": {"driver": DRIVER, "parameters": {"kind": "Gpu"}}}]
    nvidia = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": NVIDIA},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{NVIDIA}'"}}]},
    }
    every = [*default_device_classes(NAMES), mps, broken, nvidia]
    return {c["metadata"]["name"]: c for c in every}


def config(requests: list[str] | None = None, driver: str = DRIVER, **fields: str) -> Object:
    """One ``spec.devices.config`` entry with a GpuShareConfig of ``fields``."""
    entry: Object = {
        "opaque": {
            "driver": driver,
            "parameters": {"apiVersion": API_VERSION, "kind": "GpuShareConfig", **fields},
        }
    }
    if requests is not None:
        entry["requests"] = requests
    return entry


def exactly(device_class: str = DRIVER, **fields: Any) -> Object:
    """Build an ``exactly`` request body; ``capacity`` is given as the requests map."""
    entry: Object = {"deviceClassName": device_class}
    capacity = fields.pop("capacity", None)
    if capacity is not None:
        entry["capacity"] = {"requests": capacity}
    return {**entry, **fields}


def claim_spec(*requests: Object, configs: list[Object] | None = None) -> Object:
    """Build a claim spec; each request is ``{"name": ..., "exactly"|"firstAvailable": ...}``."""
    devices: Object = {"requests": list(requests)}
    if configs:
        devices["config"] = configs
    return {"devices": devices}


def request(name: str = "gpu", **fields: Any) -> Object:
    """Build a request named ``name`` asking ``exactly`` for ``fields``."""
    return {"name": name, "exactly": exactly(**fields)}


def claim(spec: Object, name: str = "c", namespace: str = "default") -> Object:
    """Build a ResourceClaim."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def template(spec: Object, name: str = "t", namespace: str = "default") -> Object:
    """Build a ResourceClaimTemplate."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": spec},
    }


def pod(
    *claims: Object, gates: list[str] | None = None, namespace: str | None = "default", **spec: Any
) -> Object:
    """Build a pod with ``spec.resourceClaims`` entries ``claims``."""
    pod_spec: Object = {"containers": [{"name": "main", "image": "cuda"}], **spec}
    if claims:
        pod_spec["resourceClaims"] = list(claims)
    if gates is not None:
        pod_spec["schedulingGates"] = [{"name": gate} for gate in gates]
    metadata: Object = {"name": "p"}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def from_template(name: str) -> Object:
    """Build a pod claim entry generated from a template."""
    return {"name": "gpu", "resourceClaimTemplateName": name}


def from_claim(name: str) -> Object:
    """Build a pod claim entry naming an existing claim."""
    return {"name": "gpu", "resourceClaimName": name}


def share_template() -> Object:
    """Build the template ``share``: 30 cores and 5Gi of one of our cards."""
    return template(claim_spec(request(capacity={"cores": "30", "memory": "5Gi"})), "share")


def review(obj: Object | None, operation: str = "CREATE", namespace: str = "default") -> bytes:
    """Build an AdmissionReview v1 request for ``obj``, as kube-apiserver sends it."""
    kind = (obj or {}).get("kind", "Pod")
    group = "" if kind == "Pod" else "resource.k8s.io"
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
            "namespace": namespace,
            "name": ((obj or {}).get("metadata") or {}).get("name", ""),
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
            "oldObject": obj if operation == "UPDATE" else None,
            "dryRun": False,
        },
    }
    return json.dumps(body).encode()


def response(body: bytes) -> Object:
    """Return the ``response`` of an AdmissionReview answer, after checking its envelope."""
    answer = json.loads(body)
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert answer["response"]["uid"] == UID
    return dict(answer["response"])


def decoded_patch(answer: Mapping[str, Any]) -> list[Object]:
    """Return the JSON Patch of an answer."""
    assert answer["patchType"] == "JSONPatch"
    return list(json.loads(base64.b64decode(answer["patch"])))


@dataclass
class FakeCluster:
    """An in-memory :class:`~dra_driver.webhook.admission.Cluster`; live reads are recorded."""

    classes: dict[str, Object] = field(default_factory=classes)
    templates: dict[tuple[str, str], Object] = field(default_factory=dict)
    claims: dict[tuple[str, str], Object] = field(default_factory=dict)
    live: dict[tuple[str, str, str], Object] = field(default_factory=dict)
    limits_value: Limits = LIMITS
    synced: bool = True
    fetched: list[tuple[str, str, str]] = field(default_factory=list)
    quota_list: list[Quota] = field(default_factory=list)

    def device_classes(self) -> Mapping[str, Object]:
        return self.classes

    def limits(self) -> Limits:
        return self.limits_value

    def template(self, namespace: str, name: str) -> Object | None:
        return self.templates.get((namespace, name))

    def claim(self, namespace: str, name: str) -> Object | None:
        return self.claims.get((namespace, name))

    def fetch_template(self, namespace: str, name: str) -> Object | None:
        self.fetched.append(("ResourceClaimTemplate", namespace, name))
        return self.live.get(("ResourceClaimTemplate", namespace, name))

    def fetch_claim(self, namespace: str, name: str) -> Object | None:
        self.fetched.append(("ResourceClaim", namespace, name))
        return self.live.get(("ResourceClaim", namespace, name))

    def quotas(self, namespace: str) -> list[Quota]:
        return [quota for quota in self.quota_list if quota.namespace == namespace]


def write_certificate(directory: Path, name: str = "tls") -> tuple[Path, Path, bytes]:
    """Write a fresh self-signed pair for 127.0.0.1; return the files and the DER certificate."""
    cert_file, key_file = write_self_signed(directory, name)
    return cert_file, key_file, ssl.PEM_cert_to_DER_cert(cert_file.read_text())
