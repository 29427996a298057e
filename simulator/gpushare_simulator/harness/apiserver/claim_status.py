"""ResourceClaim status rules (``validateResourceClaimStatusUpdate``) and claim immutability."""

from __future__ import annotations

from typing import Any, Final

from dra_driver.k8s import objects
from gpushare_simulator.harness.apiserver import errors, formats
from gpushare_simulator.harness.apiserver.dra_common import (
    dns_label,
    driver_name,
    each,
    each_unique,
    opaque,
    pool_name,
    qualified_name,
    request_names,
    request_ref,
)
from gpushare_simulator.harness.apiserver.errors import FieldError

JSON = dict[str, Any]
MAX_RESULTS: Final = 32
MAX_ALLOCATION_CONFIG: Final = 64
MAX_RESERVED_FOR: Final = 256
MAX_CONDITIONS: Final = 8
IMMUTABLE: Final = "field is immutable"


def immutable(old: object, new: object, path: str) -> list[FieldError]:
    """``ValidateImmutableField``."""
    return [] if old == new else [errors.invalid(path, new, IMMUTABLE)]


def claim_update(old: JSON, new: JSON) -> list[FieldError]:
    """``ValidateResourceClaimUpdate``: the spec never changes."""
    return immutable(old.get("spec"), new.get("spec"), "spec")


def template_update(old: JSON, new: JSON) -> list[FieldError]:
    """``ValidateResourceClaimTemplateUpdate``: the template spec never changes."""
    return immutable(old.get("spec"), new.get("spec"), "spec")


def slice_update(old: JSON, new: JSON) -> list[FieldError]:
    """``ValidateResourceSliceUpdate``: driver, pool name and node name are immutable."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    errs = immutable(old_spec.get("driver"), new_spec.get("driver"), "spec.driver")
    old_pool, new_pool = old_spec.get("pool") or {}, new_spec.get("pool") or {}
    errs += immutable(old_pool.get("name"), new_pool.get("name"), "spec.pool.name")
    return errs + immutable(old_spec.get("nodeName"), new_spec.get("nodeName"), "spec.nodeName")


def _device_ids(allocation: object) -> set[str]:
    ids: set[str] = set()
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = (devices or {}).get("results") or []
    for result in results:
        if isinstance(result, dict):
            base = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
            ids.add(base if not result.get("shareID") else f"{base}/{result['shareID']}")
    return ids


def _consumer(reference: object, path: str) -> list[FieldError]:
    if not isinstance(reference, dict):
        return []
    return [
        errors.required(f"{path}.{key}")
        for key in ("resource", "name", "uid")
        if not reference.get(key)
    ]


def _result(result: object, path: str, known: set[str]) -> list[FieldError]:
    if not isinstance(result, dict):
        return []
    errs = request_ref(result.get("request"), f"{path}.request", known)
    errs += driver_name(result.get("driver"), f"{path}.driver")
    errs += pool_name(result.get("pool"), f"{path}.pool")
    errs += dns_label(result.get("device"), f"{path}.device")
    share = result.get("shareID")
    if share is not None and not formats.is_uuid(str(share)):
        detail = "must be a lowercase UUID in 8-4-4-4-12 format"
        errs.append(errors.invalid(f"{path}.shareID", share, detail))
    for name in result.get("consumedCapacity") or {}:
        errs += qualified_name(name, f"{path}.consumedCapacity[{name}]")
    for key in ("bindingConditions", "bindingFailureConditions"):
        errs += each(result.get(key), f"{path}.{key}", 4, lambda _i, _p: [])
    return errs


def _allocation_config(config: object, path: str, known: set[str]) -> list[FieldError]:
    if not isinstance(config, dict):
        return []
    errs: list[FieldError] = []
    source = config.get("source")
    if not source:
        errs.append(errors.required(f"{path}.source"))
    elif source not in {"FromClass", "FromClaim"}:
        errs.append(errors.not_supported(f"{path}.source", source, ["FromClaim", "FromClass"]))
    errs += each_unique(
        config.get("requests"),
        f"{path}.requests",
        MAX_RESULTS,
        lambda name, at: request_ref(name, at, known),
        None,
    )
    if config.get("opaque") is None:
        return [*errs, errors.required(path, "exactly one of `opaque` is required")]
    return errs + opaque(config["opaque"], f"{path}.opaque", stored=False)


def allocation(value: object, path: str, known: set[str]) -> list[FieldError]:
    """``validateAllocationResult`` of a newly set allocation."""
    if not isinstance(value, dict):
        return []
    devices = value.get("devices") or {}
    errs = each(
        devices.get("results"),
        f"{path}.devices.results",
        MAX_RESULTS,
        lambda r, p: _result(r, p, known),
    )
    errs += each(
        devices.get("config"),
        f"{path}.devices.config",
        MAX_ALLOCATION_CONFIG,
        lambda c, p: _allocation_config(c, p, known),
    )
    terms = (value.get("nodeSelector") or {}).get("nodeSelectorTerms")
    if value.get("nodeSelector") is not None and not terms:
        errs.append(
            errors.required(
                f"{path}.nodeSelector.nodeSelectorTerms",
                "must have at least one node selector term",
            )
        )
    return errs


def claim_status(old: JSON, new: JSON) -> list[FieldError]:
    """``validateResourceClaimStatusUpdate`` for a write to ``resourceclaims/status``."""
    status, old_status = new.get("status") or {}, old.get("status") or {}
    known = request_names(objects.spec(new).get("devices"))
    reserved = status.get("reservedFor") or []
    errs = each_unique(reserved, "status.reservedFor", MAX_RESERVED_FOR, _consumer, "uid")
    allocated = _device_ids(status.get("allocation"))

    def device(entry: object, path: str) -> list[FieldError]:
        if not isinstance(entry, dict):
            return []
        base = f"{entry.get('driver')}/{entry.get('pool')}/{entry.get('device')}"
        key = base if not entry.get("shareID") else f"{base}/{entry['shareID']}"
        problems = each(
            entry.get("conditions"), f"{path}.conditions", MAX_CONDITIONS, lambda _c, _p: []
        )
        if key not in allocated:
            problems.append(errors.invalid(path, key, "must be an allocated device in the claim"))
        return problems

    errs += each(status.get("devices"), "status.devices", -1, device)
    if reserved:
        if status.get("allocation") is None:
            detail = "may not be specified when `allocated` is not set"
            errs.append(errors.forbidden("status.reservedFor", detail))
        elif new.get("metadata", {}).get("deletionTimestamp"):
            before = {str(r.get("uid")) for r in old_status.get("reservedFor") or []}
            if any(str(r.get("uid")) not in before for r in reserved):
                detail = (
                    "new entries may not be added while `deallocationRequested` or "
                    "`deletionTimestamp` are set"
                )
                errs.append(errors.forbidden("status.reservedFor", detail))
    old_allocation, new_allocation = old_status.get("allocation"), status.get("allocation")
    if old_allocation is not None and new_allocation is not None:
        errs += immutable(old_allocation, new_allocation, "status.allocation")
    elif new_allocation is not None:
        errs += allocation(new_allocation, "status.allocation", known)
    return errs
