"""Semantic validation of ResourceClaim and ResourceClaimTemplate specs (validateDeviceClaim)."""

from __future__ import annotations

from typing import Any, Final

from dra_driver.k8s import objects
from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.dra_common import (
    dns_label,
    dns_subdomain,
    each,
    each_unique,
    one_of,
    opaque,
    qualified_name,
    request_names,
    request_ref,
)
from gpushare_simulator.harness.apiserver.errors import FieldError

JSON = dict[str, Any]
MAX_REQUESTS: Final = 32
MAX_SELECTORS: Final = 32
MAX_FIRST_AVAILABLE: Final = 8
MAX_TOLERATIONS: Final = 16
MAX_CEL: Final = 10 * 1024


def selectors(selectors: object, path: str) -> list[FieldError]:
    """``validateSelectorSlice``: CEL selectors, at most 32, expressions at most 10 KiB."""

    def check(selector: object, where: str) -> list[FieldError]:
        cel = selector.get("cel") if isinstance(selector, dict) else None
        if not isinstance(cel, dict):
            return [errors.required(f"{where}.cel")]
        expression = str(cel.get("expression") or "")
        if not expression:
            return [errors.required(f"{where}.cel.expression")]
        if len(expression) > MAX_CEL:
            return [errors.too_long(f"{where}.cel.expression", MAX_CEL)]
        return []

    return each(selectors, path, MAX_SELECTORS, check)


def _exact(request: object, path: str, *, admin: bool = True) -> list[FieldError]:
    if not isinstance(request, dict):
        return []
    errs = dns_subdomain(request.get("deviceClassName"), f"{path}.deviceClassName")
    errs += selectors(request.get("selectors"), f"{path}.selectors")
    mode = request.get("allocationMode", "ExactCount")
    count = request.get("count")
    if mode == "All" and count:
        detail = "must not be specified when allocationMode is 'All'"
        errs.append(errors.invalid(f"{path}.count", count, detail))
    elif mode == "ExactCount" and (count is None or int(count) <= 0):
        errs.append(errors.invalid(f"{path}.count", count or 0, "must be greater than zero"))
    elif mode not in {"All", "ExactCount"}:
        errs.append(errors.not_supported(f"{path}.allocationMode", mode, ["All", "ExactCount"]))
    if not admin and request.get("adminAccess") is not None:
        errs.append(errors.forbidden(f"{path}.adminAccess", "not supported in a sub-request"))
    errs += each(request.get("tolerations"), f"{path}.tolerations", MAX_TOLERATIONS, _toleration)
    requests = (request.get("capacity") or {}).get("requests") or {}
    for name in requests:
        errs += qualified_name(name, f"{path}.capacity.requests[{name}]")
    return errs


def _toleration(toleration: object, path: str) -> list[FieldError]:
    if not isinstance(toleration, dict):
        return []
    errs: list[FieldError] = []
    operator = toleration.get("operator", "Equal")
    if operator not in {"Equal", "Exists"}:
        errs.append(errors.not_supported(f"{path}.operator", operator, ["Equal", "Exists"]))
    if operator == "Exists" and toleration.get("value"):
        detail = "value must be empty when `operator` is 'Exists'"
        errs.append(errors.invalid(f"{path}.operator", operator, detail))
    effect = toleration.get("effect")
    if effect and effect not in {"NoSchedule", "NoExecute"}:
        errs.append(errors.not_supported(f"{path}.effect", effect, ["NoExecute", "NoSchedule"]))
    return errs


def device_claim(devices: object, path: str, *, stored: bool = False) -> list[FieldError]:
    """``validateDeviceClaim``: requests, constraints and config of a claim spec."""
    if not isinstance(devices, dict):
        return []
    known = request_names(devices)

    def request(item: object, where: str) -> list[FieldError]:
        if not isinstance(item, dict):
            return []
        errs = dns_label(item.get("name"), f"{where}.name")
        present = []
        if item.get("firstAvailable"):
            present.append("firstAvailable")

            def sub(entry: object, at: str) -> list[FieldError]:
                if not isinstance(entry, dict):
                    return []
                name_errs = dns_label(entry.get("name"), f"{at}.name")
                return name_errs + _exact(entry, at, admin=False)

            errs += each_unique(
                item["firstAvailable"], f"{where}.firstAvailable", MAX_FIRST_AVAILABLE, sub, "name"
            )
        if item.get("exactly") is not None:
            present.append("exactly")
            errs += _exact(item["exactly"], f"{where}.exactly")
        return errs + one_of(present, where, "`exactly` or `firstAvailable`")

    errs = each_unique(devices.get("requests"), f"{path}.requests", MAX_REQUESTS, request, "name")

    def request_refs(item: dict[str, Any], where: str) -> list[FieldError]:
        # Constraints and configs name requests the same way: each must exist, once.
        return each_unique(
            item.get("requests"),
            f"{where}.requests",
            MAX_REQUESTS,
            lambda name, at: request_ref(name, at, known),
            None,
        )

    def constraint(item: object, where: str) -> list[FieldError]:
        if not isinstance(item, dict):
            return []
        errs = request_refs(item, where)
        present = [k for k in ("matchAttribute", "distinctAttribute") if item.get(k) is not None]
        for key in present:
            errs += qualified_name(item[key], f"{where}.{key}", full=True)
        return errs + one_of(present, where, "`matchAttribute` or `distinctAttribute`")

    errs += each(devices.get("constraints"), f"{path}.constraints", MAX_REQUESTS, constraint)

    def config(item: object, where: str) -> list[FieldError]:
        if not isinstance(item, dict):
            return []
        errs = request_refs(item, where)
        if item.get("opaque") is None:
            return [*errs, errors.required(where, "exactly one of `opaque` is required")]
        return errs + opaque(item["opaque"], f"{where}.opaque", stored=stored)

    return errs + each(devices.get("config"), f"{path}.config", MAX_REQUESTS, config)


def resource_claim(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidateResourceClaim`` (the spec; the status is checked on status writes)."""
    return device_claim(objects.spec(obj).get("devices"), "spec.devices")


def resource_claim_template(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidateResourceClaimTemplate``: its claim spec, and only labels/annotations as meta."""
    template = objects.spec(obj)
    errs = device_claim((objects.spec(template).get("devices")), "spec.spec.devices", stored=False)
    for key in template.get("metadata") or {}:
        if key not in {"labels", "annotations"}:
            errs.append(errors.forbidden(f"spec.metadata.{key}", "must be empty"))
    return errs
