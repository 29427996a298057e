"""Kubernetes objects as the driver holds them, and the accessors that read them.

Every object is the API server's JSON, decoded and nothing more (:data:`Object`): what a
component reads is what the server sent, and a patch is built from the fields it changes, so
nothing it does not know about is ever re-serialized on the way back (a model class would).
The accessors give the parts a component reads as read-only mappings, empty where the object
has none, so a reader never needs ``(obj.get("status") or {})``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeAlias

Object: TypeAlias = dict[str, Any]
"""A Kubernetes object: decoded JSON, as the API server sent it."""
ObjectView: TypeAlias = Mapping[str, Any]
"""An object, or a part of one (``metadata``, ``spec``, ``status`` or below), read only."""

_EMPTY: ObjectView = MappingProxyType({})


def part(obj: ObjectView | None, name: str) -> ObjectView:
    """Return ``obj[name]`` when it is a mapping, else an empty one."""
    value = (obj or _EMPTY).get(name)
    return value if isinstance(value, Mapping) else _EMPTY


def metadata(obj: ObjectView | None) -> ObjectView:
    """Return the object's ``metadata`` (empty if it has none)."""
    return part(obj, "metadata")


def spec(obj: ObjectView | None) -> ObjectView:
    """Return the object's ``spec`` (empty if it has none)."""
    return part(obj, "spec")


def status(obj: ObjectView | None) -> ObjectView:
    """Return the object's ``status`` (empty if it has none)."""
    return part(obj, "status")


def name(obj: ObjectView | None) -> str:
    """Return metadata.name ("" if unset)."""
    return str(metadata(obj).get("name") or "")


def namespace(obj: ObjectView | None) -> str:
    """Return metadata.namespace ("" for a cluster-scoped object)."""
    return str(metadata(obj).get("namespace") or "")


def uid(obj: Object) -> str:
    """Return metadata.uid."""
    return str(metadata(obj).get("uid") or "")


def version_number(version: object) -> int:
    """Read a resourceVersion as a number, as kube-scheduler's assume cache does (0 if not)."""
    try:
        return int(str(version or 0))
    except ValueError:
        return 0


def resource_version_number(obj: Object | None) -> int:
    """Return metadata.resourceVersion as a number (see :func:`version_number`)."""
    return version_number(metadata(obj).get("resourceVersion"))


def is_deleting(obj: Object) -> bool:
    """Whether deletion has started (a deletionTimestamp is set)."""
    return bool(metadata(obj).get("deletionTimestamp"))


def is_terminal(pod: Object) -> bool:
    """Whether a pod has finished: it will never run again."""
    return status(pod).get("phase") in ("Succeeded", "Failed")


def controller_reference(obj: Object) -> Object | None:
    """Return the ownerReference with ``controller: true``, if any."""
    for reference in metadata(obj).get("ownerReferences") or []:
        if reference.get("controller"):
            return dict(reference)
    return None


def controller_uid(obj: Object) -> str | None:
    """Return the UID of the controlling owner, if any."""
    reference = controller_reference(obj)
    return None if reference is None else str(reference.get("uid"))


def owner_reference(owner: Object) -> Object:
    """Build a controller ownerReference pointing at ``owner``."""
    return {
        "apiVersion": owner.get("apiVersion", "v1"),
        "kind": owner.get("kind", "Pod"),
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def reserved_uids(claim: Object) -> set[str]:
    """UIDs of the consumers in a claim's ``status.reservedFor``."""
    return {str(r.get("uid")) for r in status(claim).get("reservedFor") or []}


def pod_claim_names(pod: Object) -> dict[str, str | None]:
    """Map each pod claim entry to its ResourceClaim name (None: not generated yet)."""
    generated = {
        entry["name"]: entry.get("resourceClaimName")
        for entry in status(pod).get("resourceClaimStatuses") or []
    }
    names: dict[str, str | None] = {}
    for entry in spec(pod).get("resourceClaims") or []:
        if entry.get("resourceClaimName"):
            names[entry["name"]] = entry["resourceClaimName"]
        else:
            names[entry["name"]] = generated.get(entry["name"])
    return names


def has_scheduling_gate(pod: Object, gate: str) -> bool:
    """Whether the pod still carries the scheduling gate ``gate``."""
    gates = spec(pod).get("schedulingGates") or []
    return any(g.get("name") == gate for g in gates)


def waiting_for_other_gates(pod: Object, gate: str) -> str | None:
    """Say which scheduling gates besides ``gate`` the pod still waits for; None: no other."""
    gates = spec(pod).get("schedulingGates") or []
    others = [str(g.get("name")) for g in gates if g.get("name") != gate]
    return f"waiting for the pod's other scheduling gates: {', '.join(others)}" if others else None
