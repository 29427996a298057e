"""``pods/binding``: the scheduler's way to set ``spec.nodeName``, with the server's checks."""

from __future__ import annotations

from typing import Any, Final

from dra_driver.k8s import objects
from gpushare_simulator.harness.apiserver import errors, strategies
from gpushare_simulator.harness.apiserver.operations import Result
from gpushare_simulator.harness.apiserver.resources import REGISTRY
from gpushare_simulator.harness.apiserver.store import Store, guaranteed

JSON = dict[str, Any]
PODS: Final = REGISTRY.resolve("pods")


def bind(
    store: Store, namespace: str, pod_name: str, body: object, *, dry_run: bool = False
) -> Result:
    """``pods/binding``: set ``spec.nodeName`` once, as the scheduler does."""
    meta, target = _binding(body, pod_name)

    def attempt() -> Result | None:
        current = store.get(PODS, namespace, pod_name)
        if current is None:
            raise PODS.not_found(pod_name)
        pod = current.copy()
        pod_meta, spec = pod["metadata"], pod.setdefault("spec", {})
        for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            if meta.get(key) and meta[key] != pod_meta[key]:
                raise PODS.conflict(
                    pod_name,
                    f"Precondition failed: {label} in precondition: {meta[key]}, "
                    f"{label} in object meta: {pod_meta[key]}",
                )
        problem = _unbindable(pod, pod_name)
        if problem:
            raise errors.conflict("", "pods/binding", pod_name, problem)
        spec["nodeName"] = target["name"]
        for key in ("annotations", "labels"):
            if meta.get(key):
                pod_meta[key] = {**(pod_meta.get(key) or {}), **meta[key]}
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        now = strategies.timestamp()
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now})
        status["conditions"] = conditions
        if dry_run or store.replace(PODS, pod, current.rv, remove=False) is not None:
            ok = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            return Result(201, {**ok, "code": 201})
        return None

    return guaranteed(attempt, f"pods {pod_name}")


def _binding(body: object, pod_name: str) -> tuple[JSON, JSON]:
    """Check a Binding body; return its metadata and target."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be a Binding object")
    meta, target = body.get("metadata") or {}, body.get("target") or {}
    if meta.get("name") and meta["name"] != pod_name:
        raise errors.bad_request("name in URL does not match name in Binding object")
    errs = []
    if not target.get("name"):
        errs.append(errors.required("target.name"))
    if target.get("kind") not in {None, "", "Node"}:
        errs.append(errors.not_supported("target.kind", target["kind"], ["Node", "<empty>"]))
    if errs:
        raise errors.invalid_object("", "Binding", pod_name, errs)
    return meta, target


def _unbindable(pod: JSON, name: str) -> str | None:
    """Why a pod cannot be bound now, in the server's words (``None``: it can)."""
    if pod["metadata"].get("deletionTimestamp"):
        return f"pod {name} is being deleted, cannot be assigned to a host"
    node = objects.spec(pod).get("nodeName")
    if node:
        return f'pod {name} is already assigned to node "{node}"'
    if objects.spec(pod).get("schedulingGates"):
        return f"pod {name} has non-empty .spec.schedulingGates"
    return None
