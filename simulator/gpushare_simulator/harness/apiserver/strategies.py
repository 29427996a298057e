"""Per-kind create/update strategies: system metadata, status subresource, defaults, generation.

What ``PrepareForCreate``/``PrepareForUpdate`` and the defaulting functions of the real registry
do for the kinds we serve: writes to the main resource keep the stored ``status``; writes to
``/status`` keep everything but ``status``; ``generation`` starts at 1 and grows on spec changes.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from dra_driver.k8s import objects
from dra_driver.k8s.timestamps import rfc3339
from gpushare_simulator.harness.apiserver import budgets, webhook_config
from gpushare_simulator.harness.apiserver.resources import ADMISSION, ResourceType

JSON = dict[str, Any]
SYSTEM_FIELDS: Final = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_NOT_READY_TOLERATIONS: Final = (
    ("node.kubernetes.io/not-ready", 300),
    ("node.kubernetes.io/unreachable", 300),
)


def timestamp(offset_seconds: float = 0) -> str:
    """Return an RFC 3339 UTC timestamp with second precision, as ``metav1.Time`` serializes."""
    return rfc3339(datetime.now(UTC) + timedelta(seconds=offset_seconds))


def generate_name(prefix: str) -> str:
    """``generateName`` plus five random characters from the server's alphabet."""
    return prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))


def prepare_create(rtype: ResourceType, obj: JSON, *, keep_status: bool = False) -> None:
    """Stamp system metadata, reset status where the strategy does, and apply defaults."""
    meta = obj["metadata"]
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = timestamp()
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
        meta.pop(key, None)
    _managed_fields(meta, None)
    if rtype.generation:
        meta["generation"] = 1
    else:
        meta.pop("generation", None)
    _create_defaults(rtype, obj, keep_status=keep_status)


def _create_defaults(rtype: ResourceType, obj: JSON, *, keep_status: bool) -> None:
    """Reset status and apply the defaults of ``rtype``'s strategy on create."""
    if rtype.key == "pods":
        _default_pod(obj, keep_status=keep_status)
    elif rtype.key == "namespaces":
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif rtype.key == "resourceclaims.resource.k8s.io":
        _default_claim_spec(obj.get("spec"))
        if not keep_status:
            obj["status"] = {}
    elif rtype.key == "resourceclaimtemplates.resource.k8s.io":
        _default_claim_spec(objects.spec(obj).get("spec"))
    elif rtype.key == "resourceslices.resource.k8s.io":
        _stamp_taints(obj.get("spec"))
    elif rtype.group == ADMISSION:
        webhook_config.set_defaults(obj, mutating=rtype.kind.startswith("Mutating"))
    elif rtype.key == budgets.KEY:
        if not keep_status:
            obj["status"] = {}
        budgets.default_status(obj)
    elif rtype.custom and "status" in rtype.subresources and not keep_status:
        # A custom resource with a status subresource: its status is written there only.
        obj.pop("status", None)


def _keep(source: JSON, target: JSON, key: str) -> None:
    """Copy ``source[key]`` into ``target`` (or drop it from ``target`` when absent)."""
    if key in source:
        target[key] = source[key]
    else:
        target.pop(key, None)


def _managed_fields(meta: JSON, stored: object) -> None:
    """Keep managedFields as the real server's rules for writers leave them.

    The fake records what a writer sends rather than computing ownership. A write that leaves
    them out, or sends an empty list, keeps the stored ones (so a client that does not know
    the field never strips it); ``[{}]`` clears them.
    """
    given = meta.get("managedFields")
    if given == [{}]:
        meta.pop("managedFields")
    elif not given:
        meta.pop("managedFields", None)
        if stored:
            meta["managedFields"] = stored


def default_fields(rtype: ResourceType, new: JSON) -> None:
    """Apply the field defaults decoding gives a write (what admission webhooks already see)."""
    if rtype.key == "resourceclaims.resource.k8s.io":
        _default_claim_spec(new.get("spec"))
    elif rtype.key == "resourceclaimtemplates.resource.k8s.io":
        _default_claim_spec(objects.spec(new).get("spec"))
    elif rtype.key == "pods":
        _default_pod_spec(new.setdefault("spec", {}))
    elif rtype.key == "resourceslices.resource.k8s.io":
        _stamp_taints(new.get("spec"))
    elif rtype.group == ADMISSION:
        webhook_config.set_defaults(new, mutating=rtype.kind.startswith("Mutating"))


def prepare_update(rtype: ResourceType, old: JSON, new: JSON, subresource: str) -> JSON:
    """Return the object to store for a write of ``new`` over ``old``.

    ``old`` must be a private copy (it may be returned, modified, for status writes).
    """
    if subresource == "status":
        _keep(new, old, "status")
        if rtype.key == budgets.KEY:
            budgets.default_status(old)
        return old
    meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
    for key in (*SYSTEM_FIELDS, "generation", "namespace"):
        _keep(old_meta, meta, key)
    _managed_fields(meta, old_meta.get("managedFields"))
    meta.pop("selfLink", None)
    if rtype.has_status:
        _keep(old, new, "status")
    if rtype.key == "namespaces":
        new["spec"] = old.get("spec", {})
    default_fields(rtype, new)
    spec_key = "webhooks" if rtype.group == ADMISSION else "spec"
    if rtype.generation and new.get(spec_key) != old.get(spec_key):
        meta["generation"] = int(old_meta.get("generation", 0)) + 1
    return new


def mark_deleting(obj: JSON, grace_seconds: int = 0) -> None:
    """Set ``deletionTimestamp`` as a delete with finalizers (or grace) does; bump generation."""
    meta = obj["metadata"]
    meta["deletionTimestamp"] = timestamp(grace_seconds)
    meta["deletionGracePeriodSeconds"] = grace_seconds
    if int(meta.get("generation", 0)) > 0:
        meta["generation"] = int(meta["generation"]) + 1


def _stamp_taints(spec: object) -> None:
    """Give every device taint without ``timeAdded`` the time of this write, as the server does."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    for device in devices if isinstance(devices, list) else []:
        taints = device.get("taints") if isinstance(device, dict) else None
        for taint in taints if isinstance(taints, list) else []:
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                taint["timeAdded"] = timestamp()


def _default_request(request: object) -> None:
    if not isinstance(request, dict):
        return
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount":
        request.setdefault("count", 1)
    for toleration in request.get("tolerations") or []:
        if isinstance(toleration, dict):
            toleration.setdefault("operator", "Equal")


def _default_claim_spec(spec: object) -> None:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    for request in (devices or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        _default_request(request.get("exactly"))
        for sub in request.get("firstAvailable") or []:
            _default_request(sub)


def _image_pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


def _default_pod_spec(spec: JSON) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            if not isinstance(container, dict):
                continue
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault(
                "imagePullPolicy", _image_pull_policy(str(container.get("image", "")))
            )
            container.setdefault("resources", {})


def _qos_class(spec: JSON) -> str:
    containers = [c for c in (spec.get("containers") or []) if isinstance(c, dict)]
    requests_and_limits = [
        (
            (c.get("resources") or {}).get("requests") or {},
            (c.get("resources") or {}).get("limits") or {},
        )
        for c in containers
    ]
    if not any(r or lim for r, lim in requests_and_limits):
        return "BestEffort"
    guaranteed = all(
        all(
            lim.get(res) is not None and r.get(res, lim.get(res)) == lim.get(res)
            for res in ("cpu", "memory")
        )
        for r, lim in requests_and_limits
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _default_pod(obj: JSON, *, keep_status: bool) -> None:
    spec = obj.setdefault("spec", {})
    _default_pod_spec(spec)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    present = {t.get("key") for t in tolerations if isinstance(t, dict)}
    for key, seconds in _NOT_READY_TOLERATIONS:
        if key not in present:
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": seconds,
                }
            )
    given = obj.get("status")
    status: JSON = given if keep_status and isinstance(given, dict) else {}
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", _qos_class(spec))
    obj["status"] = status
