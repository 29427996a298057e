"""Field checks shared by the resource.k8s.io/v1 kinds (pkg/apis/resource/validation)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from gpushare_simulator.harness.apiserver import errors, formats
from gpushare_simulator.harness.apiserver.errors import FieldError

DRIVER_NAME_MAX: Final = 63
POOL_NAME_MAX: Final = 253
C_IDENTIFIER_MAX: Final = 32
OPAQUE_PARAMETERS_MAX: Final = 10 * 1024
REQUEST_REF_DETAIL: Final = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)

Item = Callable[[Any, str], list[FieldError]]


def each(items: object, path: str, maximum: int, check: Item) -> list[FieldError]:
    """``validateSlice``: check every item, then the length."""
    seq = items if isinstance(items, list) else []
    errs = [e for index, item in enumerate(seq) for e in check(item, f"{path}[{index}]")]
    if maximum >= 0 and len(seq) > maximum:
        errs.append(errors.too_many(path, len(seq), maximum))
    return errs


def each_unique(
    items: object, path: str, maximum: int, check: Item, key: str | None
) -> list[FieldError]:
    """``validateSet``: :func:`each` plus a Duplicate error per repeated key."""
    errs = each(items, path, maximum, check)
    seen: set[str] = set()
    for index, item in enumerate(items if isinstance(items, list) else []):
        value = item.get(key) if key and isinstance(item, dict) else item
        where = f"{path}[{index}].{key}" if key else f"{path}[{index}]"
        marker = json.dumps(value, sort_keys=True)
        if marker in seen:
            errs.append(errors.duplicate(where, value))
        seen.add(marker)
    return errs


def messages(path: str, value: str, problems: Iterable[str]) -> list[FieldError]:
    """One Invalid error per problem message, as the Go loops over ``Is*`` results do."""
    return [errors.invalid(path, value, problem) for problem in problems]


def dns_label(name: object, path: str) -> list[FieldError]:
    """Return a required RFC 1123 label (device, request and container names)."""
    if not name:
        return [errors.required(path)]
    return messages(path, str(name), formats.dns1123_label(str(name)))


def dns_subdomain(name: object, path: str) -> list[FieldError]:
    """Return a required RFC 1123 subdomain (class names, node names)."""
    if not name:
        return [errors.required(path)]
    return messages(path, str(name), formats.dns1123_subdomain(str(name)))


def driver_name(name: object, path: str) -> list[FieldError]:
    """``validateDriverName``: a DNS subdomain of at most 63 characters."""
    if not name:
        return [errors.required(path)]
    text = str(name)
    errs = [errors.too_long(path, DRIVER_NAME_MAX)] if len(text) > DRIVER_NAME_MAX else []
    return errs + messages(path, text, formats.dns1123_subdomain(text.lower()))


def pool_name(name: object, path: str) -> list[FieldError]:
    """``validatePoolName``: DNS subdomains separated by ``/``, at most 253 characters."""
    if not name:
        return [errors.required(path)]
    text = str(name)
    errs = [errors.too_long(path, POOL_NAME_MAX)] if len(text) > POOL_NAME_MAX else []
    for part in text.split("/"):
        errs += messages(path, text, formats.dns1123_subdomain(part))
    return errs


def c_identifier(name: str, path: str) -> list[FieldError]:
    """``validateCIdentifier``."""
    errs = [errors.too_long(path, C_IDENTIFIER_MAX)] if len(name) > C_IDENTIFIER_MAX else []
    return errs + messages(path, name, formats.c_identifier(name))


def qualified_name(name: object, path: str, *, full: bool = False) -> list[FieldError]:
    """``validateQualifiedName`` (attribute/capacity names); ``full`` requires a domain."""
    text = str(name or "")
    if not text:
        return [errors.required(path, "name required")]
    parts = text.split("/")
    if len(parts) == 1:
        errs = c_identifier(parts[0], path)
        if full:
            errs.append(errors.required(path, "must include a domain"))
        return errs
    if len(parts) > 2:  # noqa: PLR2004 - domain and identifier
        return [errors.invalid(path, text, "a qualified name must contain at most one '/'")]
    errs = []
    if not parts[0]:
        errs.append(errors.required(path, "the domain must not be empty"))
    else:
        errs += driver_name(parts[0], path)
    if not parts[1]:
        errs.append(errors.required(path, "the name must not be empty"))
    else:
        errs += c_identifier(parts[1], path)
    return errs


def request_ref(name: object, path: str, known: set[str]) -> list[FieldError]:
    """``validateRequestNameRef``: ``request`` or ``request/subrequest`` naming the spec."""
    text = str(name or "")
    segments = text.split("/")
    if len(segments) > 2:  # noqa: PLR2004 - request and subrequest
        return [errors.invalid(path, text, REQUEST_REF_DETAIL)]
    errs = [e for segment in segments for e in dns_label(segment, path)]
    if text not in known:
        errs.append(errors.invalid(path, text, REQUEST_REF_DETAIL))
    return errs


def opaque(config: object, path: str, *, stored: bool) -> list[FieldError]:
    """``validateOpaqueConfiguration``: driver name and a JSON-object ``parameters`` ≤ 10 KiB."""
    if not isinstance(config, dict):
        return []
    errs = driver_name(config.get("driver"), f"{path}.driver")
    where = f"{path}.parameters"
    parameters = config.get("parameters")
    raw = json.dumps(parameters, separators=(",", ":"))
    if parameters is None:
        errs.append(errors.required(where))
    elif not stored and len(raw.encode()) > OPAQUE_PARAMETERS_MAX:
        errs.append(errors.too_long(where, OPAQUE_PARAMETERS_MAX))
    elif not isinstance(parameters, dict):
        errs.append(errors.invalid(where, "<value omitted>", "must be a valid JSON object"))
    return errs


def request_names(devices: object) -> set[str]:
    """Every name a result, config or constraint may reference: ``req`` and ``req/sub``."""
    names: set[str] = set()
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict):
            continue
        name = str(request.get("name", ""))
        names.add(name)
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                names.add(f"{name}/{sub.get('name', '')}")
    return names


def one_of(present: Sequence[str], path: str, names: str) -> list[FieldError]:
    """Return the "exactly one of" errors of union fields (``names`` as in the Go message)."""
    if not present:
        return [errors.required(path, f"exactly one of {names} is required")]
    if len(present) > 1:
        detail = f"exactly one of {names} is required, but multiple fields are set"
        return [errors.invalid(path, None, detail)]
    return []
