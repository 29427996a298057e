"""Semantic validation of the core kinds we serve: metadata, Pods, Events, Leases."""

from __future__ import annotations

import json
from typing import Any, Final

from dra_driver.k8s import objects
from gpushare_simulator.harness.apiserver import errors, formats
from gpushare_simulator.harness.apiserver.dra_common import (
    dns_label,
    dns_subdomain,
    each_unique,
    messages,
    one_of,
)
from gpushare_simulator.harness.apiserver.errors import FieldError
from gpushare_simulator.harness.apiserver.resources import ResourceType

JSON = dict[str, Any]
STANDARD_FINALIZERS: Final = frozenset({"kubernetes", "orphan", "foregroundDeletion"})
ANNOTATIONS_MAX: Final = 256 * 1024
POD_UPDATE_FORBIDDEN: Final = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def object_meta(rtype: ResourceType, obj: JSON, old: JSON | None) -> list[FieldError]:
    """``ValidateObjectMeta`` (+ ``ValidateObjectMetaUpdate``'s finalizer rule)."""
    meta = objects.metadata(obj)
    errs: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errs.append(errors.required("metadata.name", "name or generateName is required"))
    else:
        check = formats.dns1123_label if rtype.plural == "namespaces" else formats.dns1123_subdomain
        errs += messages("metadata.name", str(name), check(str(name)))
    if rtype.namespaced and not meta.get("namespace"):
        errs.append(errors.required("metadata.namespace"))
    for key, value in (meta.get("labels") or {}).items():
        errs += messages("metadata.labels", key, formats.qualified_name(key))
        errs += messages("metadata.labels", str(value), formats.label_value(str(value)))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        errs += messages("metadata.annotations", key, formats.qualified_name(key.lower()))
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > ANNOTATIONS_MAX:
        errs.append(errors.too_long("metadata.annotations", ANNOTATIONS_MAX))
    finalizers = meta.get("finalizers") or []
    for index, finalizer in enumerate(finalizers):
        where = f"metadata.finalizers[{index}]"
        errs += messages(where, finalizer, formats.qualified_name(finalizer))
        if "/" not in finalizer and finalizer not in STANDARD_FINALIZERS:
            detail = "name is neither a standard finalizer name nor is it fully qualified"
            errs.append(errors.invalid(where, finalizer, detail))
    errs += each_unique(finalizers, "metadata.finalizers", -1, lambda _f, _p: [], None)
    errs += _owner_references(meta.get("ownerReferences") or [])
    if old is not None and objects.metadata(old).get("deletionTimestamp"):
        before = set(objects.metadata(old).get("finalizers") or [])
        added = sorted(set(finalizers) - before)
        if added:
            detail = (
                "no new finalizers can be added if the object is being deleted, found new "
                f"finalizers {errors.go_value(added)}"
            )
            errs.append(errors.forbidden("metadata.finalizers", detail))
    return errs


def _owner_references(references: list[Any]) -> list[FieldError]:
    errs = []
    for index, reference in enumerate(references):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not (reference or {}).get(key):
                errs.append(errors.required(f"metadata.ownerReferences[{index}].{key}"))
    controllers = [r for r in references if (r or {}).get("controller") is True]
    if len(controllers) > 1:
        detail = "Only one reference can have Controller set to true"
        errs.append(errors.invalid("metadata.ownerReferences", references, detail))
    return errs


def pod(obj: JSON, _minor: int) -> list[FieldError]:
    """Check the parts of ``ValidatePodCreate`` a DRA driver's pods exercise."""
    spec = objects.spec(obj)
    errs: list[FieldError] = []
    names: set[str] = set()
    for group in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(group) or []):
            where = f"spec.{group}[{index}]"
            name = container.get("name")
            errs += dns_label(name, f"{where}.name")
            if name in names:
                errs.append(errors.duplicate(f"{where}.name", name))
            names.add(str(name))
            if not container.get("image"):
                errs.append(errors.required(f"{where}.image"))
    claim_names = []
    for index, claim in enumerate(spec.get("resourceClaims") or []):
        where = f"spec.resourceClaims[{index}]"
        errs += dns_label(claim.get("name"), f"{where}.name")
        present = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(k)]
        errs += one_of(present, where, "`resourceClaimName` or `resourceClaimTemplateName`")
        claim_names.append(str(claim.get("name")))
    errs += each_unique(spec.get("resourceClaims"), "spec.resourceClaims", -1, _none, "name")
    for group in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(group) or []):
            claims = (container.get("resources") or {}).get("claims") or []
            for position, claim in enumerate(claims):
                where = f"spec.{group}[{index}].resources.claims[{position}].name"
                if claim.get("name") not in claim_names:
                    errs.append(errors.not_supported(where, claim.get("name"), claim_names))
    for index, gate in enumerate(spec.get("schedulingGates") or []):
        where = f"spec.schedulingGates[{index}].name"
        errs += messages(
            where, str(gate.get("name")), formats.qualified_name(str(gate.get("name")))
        )
    errs += each_unique(spec.get("schedulingGates"), "spec.schedulingGates", -1, _none, "name")
    if spec.get("nodeName"):
        errs += dns_subdomain(spec["nodeName"], "spec.nodeName")
    policy = spec.get("restartPolicy", "Always")
    if policy not in {"Always", "OnFailure", "Never"}:
        supported = ["Always", "Never", "OnFailure"]
        errs.append(errors.not_supported("spec.restartPolicy", policy, supported))
    return errs


def _none(_item: object, _path: str) -> list[FieldError]:
    return []


def pod_update(old: JSON, new: JSON) -> list[FieldError]:
    """``ValidatePodUpdate``: only images, deadlines, added tolerations and removed gates change."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    errs: list[FieldError] = []
    old_gates = {g.get("name") for g in old_spec.get("schedulingGates") or []}
    for gate in new_spec.get("schedulingGates") or []:
        if gate.get("name") not in old_gates:
            detail = f"only deletion is allowed, but found new scheduling gate '{gate.get('name')}'"
            errs.append(errors.forbidden("spec.schedulingGates", detail))
    mutable = json.loads(json.dumps(new_spec))
    for group in ("containers", "initContainers"):
        for index, container in enumerate(mutable.get(group) or []):
            before = old_spec.get(group) or []
            if index < len(before):
                container["image"] = before[index].get("image")
    for key in ("activeDeadlineSeconds", "terminationGracePeriodSeconds", "schedulingGates"):
        _copy_key(old_spec, mutable, key)
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if new_tolerations[: len(old_tolerations)] == old_tolerations:
        _copy_key(old_spec, mutable, "tolerations")
    if old_gates:  # a gated pod may still gain node selector entries
        merged = dict(new_spec.get("nodeSelector") or {})
        if all(merged.get(k) == v for k, v in (old_spec.get("nodeSelector") or {}).items()):
            _copy_key(old_spec, mutable, "nodeSelector")
        _copy_key(old_spec, mutable, "affinity")
    if mutable != old_spec:
        errs.append(errors.forbidden("spec", POD_UPDATE_FORBIDDEN))
    return errs


def _copy_key(source: JSON, target: JSON, key: str) -> None:
    if key in source:
        target[key] = source[key]
    else:
        target.pop(key, None)


def core_event(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidateEventCreate`` for core/v1 events: the namespaces must agree."""
    namespace = objects.metadata(obj).get("namespace", "")
    involved = (obj.get("involvedObject") or {}).get("namespace", "")
    if (involved and involved != namespace) or (not involved and namespace not in {"", "default"}):
        return [
            errors.invalid("involvedObject.namespace", involved, "does not match event.namespace")
        ]
    return []


def event(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidateEventCreate`` for events.k8s.io/v1 events."""
    errs: list[FieldError] = []
    if not obj.get("eventTime"):
        errs.append(errors.required("eventTime"))
    if obj.get("type") not in {"Normal", "Warning"}:
        detail = f"has invalid value: {obj.get('type', '')}"
        errs.append(errors.invalid("type", "", detail))
    controller = str(obj.get("reportingController") or "")
    if not controller:
        errs.append(errors.required("reportingController"))
    else:
        errs += messages("reportingController", controller, formats.qualified_name(controller))
    for key, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
        value = str(obj.get(key) or "")
        if not value:
            errs.append(errors.required(key))
        elif len(value) > limit:
            errs.append(errors.too_long(key, limit))
    if len(str(obj.get("note") or "")) > 1024:  # noqa: PLR2004
        errs.append(errors.too_long("note", 1024))
    return errs


def lease(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidateLeaseSpec``."""
    spec = objects.spec(obj)
    errs = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and int(duration) <= 0:
        errs.append(errors.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and int(transitions) < 0:
        detail = "must be greater than or equal to 0"
        errs.append(errors.invalid("spec.leaseTransitions", transitions, detail))
    return errs
