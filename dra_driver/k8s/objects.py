"""Small accessors on raw Kubernetes objects (the dicts informers hold)."""

from __future__ import annotations

from typing import Any

Object = dict[str, Any]


def uid(obj: Object) -> str:
    """Return metadata.uid."""
    return str((obj.get("metadata") or {}).get("uid") or "")


def version_number(version: object) -> int:
    """Read a resourceVersion as a number, as kube-scheduler's assume cache does (0 if not)."""
    try:
        return int(str(version or 0))
    except ValueError:
        return 0


def resource_version_number(obj: Object | None) -> int:
    """Return metadata.resourceVersion as a number (see :func:`version_number`)."""
    return version_number(((obj or {}).get("metadata") or {}).get("resourceVersion"))


def is_deleting(obj: Object) -> bool:
    """Whether deletion has started (a deletionTimestamp is set)."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def is_terminal(pod: Object) -> bool:
    """Whether a pod has finished: it will never run again."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def controller_reference(obj: Object) -> Object | None:
    """Return the ownerReference with ``controller: true``, if any."""
    for reference in (obj.get("metadata") or {}).get("ownerReferences") or []:
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
    return {str(r.get("uid")) for r in (claim.get("status") or {}).get("reservedFor") or []}


def pod_claim_names(pod: Object) -> dict[str, str | None]:
    """Map each pod claim entry to its ResourceClaim name (None: not generated yet)."""
    generated = {
        status["name"]: status.get("resourceClaimName")
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names: dict[str, str | None] = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if entry.get("resourceClaimName"):
            names[entry["name"]] = entry["resourceClaimName"]
        else:
            names[entry["name"]] = generated.get(entry["name"])
    return names


def has_scheduling_gate(pod: Object, gate: str) -> bool:
    """Whether the pod still carries the scheduling gate ``gate``."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == gate for g in gates)


def waiting_for_other_gates(pod: Object, gate: str) -> str | None:
    """Say which scheduling gates besides ``gate`` the pod still waits for; None: no other."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    others = [str(g.get("name")) for g in gates if g.get("name") != gate]
    return f"waiting for the pod's other scheduling gates: {', '.join(others)}" if others else None
