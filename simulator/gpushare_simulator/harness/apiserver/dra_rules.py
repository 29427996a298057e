"""Semantic validation of ResourceSlice and DeviceClass.

The rules JSON schema cannot express, from pkg/apis/resource/validation, with the limits of
the API's v1 constants as each release has them (from 1.35: 64 devices in a slice where one has
taints, 16 taints per device, 8 counter sets per slice). ``minor`` is the emulated Kubernetes
minor version.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Final

from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from gpushare_simulator.harness.apiserver import errors, formats, quantity
from gpushare_simulator.harness.apiserver.claim_rules import MAX_REQUESTS, selectors
from gpushare_simulator.harness.apiserver.dra_common import (
    dns_label,
    dns_subdomain,
    driver_name,
    each,
    each_unique,
    messages,
    opaque,
    pool_name,
    qualified_name,
)
from gpushare_simulator.harness.apiserver.errors import FieldError

JSON = dict[str, Any]
MAX_DEVICES: Final = 128
MAX_DEVICES_TAINTED: Final = 64
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
MAX_ATTRIBUTE_VALUE: Final = 64
MAX_VALID_VALUES: Final = 10
NODE_FIELDS: Final = "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
_VALUE_KEYS: Final = ("bool", "int", "string", "version", "bools", "ints", "strings", "versions")


def resource_slice(obj: JSON, minor: int) -> list[FieldError]:
    """``validateResourceSliceSpec``."""
    spec = objects.spec(obj)
    errs = driver_name(spec.get("driver"), "spec.driver")
    pool = spec.get("pool") or {}
    errs += pool_name(pool.get("name"), "spec.pool.name")
    if int(pool.get("generation", 0)) < 0:
        errs.append(errors.invalid("spec.pool.generation", pool["generation"], ">= 0 required"))
    count = int(pool.get("resourceSliceCount", 0))
    if count <= 0:
        errs.append(
            errors.invalid("spec.pool.resourceSliceCount", count, "must be greater than zero")
        )
    errs += _node_selection(spec, "spec")
    devices = spec.get("devices") or []
    per_device = spec.get("perDeviceNodeSelection") is True
    tainted = any(d.get("taints") or d.get("consumesCounters") for d in devices)
    limit = MAX_DEVICES_TAINTED if tainted and minor >= 35 else MAX_DEVICES  # noqa: PLR2004
    errs += each_unique(
        devices, "spec.devices", limit, lambda d, p: _device(d, p, minor, per_device), "name"
    )
    counter_sets = spec.get("sharedCounters") or []
    if minor >= 35 and counter_sets and devices:  # noqa: PLR2004
        errs.append(
            errors.invalid("spec", None, "only one of `sharedCounters` or `devices` may be set")
        )
    set_limit = 8 if minor >= 35 else 32  # noqa: PLR2004
    errs += each_unique(counter_sets, "spec.sharedCounters", set_limit, _counter_set, "name")
    return errs


def _node_selection(spec: ObjectView, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    present = []
    if spec.get("nodeName") is not None:
        if spec["nodeName"]:
            present.append("nodeName")
            errs += dns_subdomain(spec["nodeName"], f"{path}.nodeName")
        else:
            detail = "must be either unset or set to a non-empty string"
            errs.append(errors.invalid(f"{path}.nodeName", "", detail))
    if spec.get("nodeSelector") is not None:
        present.append("nodeSelector")
        terms = (spec["nodeSelector"] or {}).get("nodeSelectorTerms") or []
        if len(terms) != 1:
            where = f"{path}.nodeSelector.nodeSelectorTerms"
            errs.append(errors.invalid(where, terms, "must have exactly one node selector term"))
    for flag in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(flag) is True:
            present.append(flag)
        elif spec.get(flag) is False:
            detail = "must be either unset or set to true"
            errs.append(errors.invalid(f"{path}.{flag}", False, detail))
    if not present:
        errs.append(errors.required(path, f"exactly one of {NODE_FIELDS} is required"))
    elif len(present) > 1:
        shown = "{" + ", ".join(f"`{name}`" for name in present) + "}"
        detail = f"exactly one of {NODE_FIELDS} is required, but multiple fields are set"
        errs.append(errors.invalid(path, shown, detail))
    return errs


def _device(device: object, path: str, minor: int, per_device: bool) -> list[FieldError]:
    if not isinstance(device, dict):
        return []
    errs = dns_label(device.get("name"), f"{path}.name")
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        detail = (
            "the total number of attributes and capacities must not exceed "
            f"{MAX_ATTRIBUTES_AND_CAPACITIES}"
        )
        errs.append(errors.invalid(path, total, detail))
    for name, attribute in attributes.items():
        where = f"{path}.attributes[{name}]"
        errs += qualified_name(name, where) + _attribute(attribute, where)
    shareable = device.get("allowMultipleAllocations") is True
    for name, entry in capacity.items():
        where = f"{path}.capacity[{name}]"
        errs += qualified_name(name, where) + _capacity(entry, where, shareable)
    taint_limit = 16 if minor >= 35 else 4  # noqa: PLR2004
    errs += each(device.get("taints"), f"{path}.taints", taint_limit, _taint)
    counters_limit = 2 if minor >= 35 else 32  # noqa: PLR2004
    errs += each(device.get("consumesCounters"), f"{path}.consumesCounters", counters_limit, _noop)
    for key in ("bindingConditions", "bindingFailureConditions"):
        errs += each(device.get(key), f"{path}.{key}", 4, _noop)
    if per_device:
        errs += _node_selection(
            {k: device.get(k) for k in ("nodeName", "nodeSelector", "allNodes")},
            path,
        )
    else:
        for key in ("nodeName", "nodeSelector", "allNodes"):
            if device.get(key) is not None:
                detail = "must not be set when `perDeviceNodeSelection` is not set"
                errs.append(errors.forbidden(f"{path}.{key}", detail))
    return errs


def _noop(_item: object, _path: str) -> list[FieldError]:
    return []


def _attribute(attribute: object, path: str) -> list[FieldError]:
    if not isinstance(attribute, dict):
        return []
    errs: list[FieldError] = []
    present = [key for key in _VALUE_KEYS if attribute.get(key) is not None]
    text = attribute.get("string")
    if isinstance(text, str) and len(text) > MAX_ATTRIBUTE_VALUE:
        errs.append(errors.too_long(f"{path}.string", MAX_ATTRIBUTE_VALUE))
    version = attribute.get("version")
    if isinstance(version, str):
        if not formats.is_semver(version):
            detail = "must be a string compatible with semver.org spec 2.0.0"
            errs.append(errors.invalid(f"{path}.version", version, detail))
        if len(version) > MAX_ATTRIBUTE_VALUE:
            errs.append(errors.too_long(f"{path}.version", MAX_ATTRIBUTE_VALUE))
    if not present:
        errs.append(errors.required(path, "exactly one value must be specified"))
    elif len(present) > 1:
        errs.append(errors.invalid(path, attribute, "exactly one value must be specified"))
    return errs


def _capacity(entry: object, path: str, shareable: bool) -> list[FieldError]:
    if not isinstance(entry, dict) or entry.get("requestPolicy") is None:
        return []
    where = f"{path}.requestPolicy"
    if not shareable:
        return [errors.forbidden(where, "allowMultipleAllocations must be true")]
    policy = entry["requestPolicy"]
    maximum = quantity.value(entry.get("value", "0"))
    errs: list[FieldError] = []
    valid_range, valid_values = policy.get("validRange"), policy.get("validValues")
    if valid_range is not None and valid_values:
        errs.append(errors.forbidden(where, "exactly one policy can be specified"))
    default = policy.get("default")
    if default is None:
        if valid_range is not None or valid_values:
            detail = "required when validRange or validValues is defined"
            errs.append(errors.required(f"{where}.default", detail))
        return errs
    wanted = quantity.value(default)
    if wanted > maximum:
        detail = "must be less than or equal to the capacity value"
        errs.append(errors.invalid(f"{where}.default", default, detail))
    if isinstance(valid_range, dict):
        errs += _valid_range(valid_range, f"{where}.validRange", maximum, default)
    if valid_values:
        values = [quantity.value(v) for v in valid_values]
        if len(values) > MAX_VALID_VALUES:
            errs.append(errors.too_many(f"{where}.validValues", len(values), MAX_VALID_VALUES))
        if values != sorted(set(values)):
            detail = "values must be unique and sorted in ascending order"
            errs.append(errors.invalid(f"{where}.validValues", valid_values, detail))
        if wanted not in values:
            detail = "default value must be one of the valid values"
            errs.append(errors.invalid(f"{where}.default", default, detail))
    return errs


def _valid_range(valid_range: JSON, path: str, maximum: Fraction, default: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if valid_range.get("min") is None:
        return [errors.required(f"{path}.min")]
    low = quantity.value(valid_range["min"])
    high = quantity.value(valid_range["max"]) if valid_range.get("max") is not None else maximum
    step = quantity.value(valid_range["step"]) if valid_range.get("step") is not None else None
    if low > maximum:
        detail = "must be less than or equal to the capacity value"
        errs.append(errors.invalid(f"{path}.min", valid_range["min"], detail))
    if high < low or high > maximum:
        detail = "must be between min and the capacity value"
        errs.append(errors.invalid(f"{path}.max", valid_range.get("max"), detail))
    if step is not None and step <= 0:
        errs.append(errors.invalid(f"{path}.step", valid_range["step"], "must be positive"))
    wanted = quantity.value(default)
    in_range = low <= wanted <= high
    on_step = step is None or step <= 0 or (wanted - low) % step == 0
    if not (in_range and on_step):
        detail = "default value must be within the valid range and a multiple of the step"
        errs.append(errors.invalid(path.rsplit(".", 1)[0] + ".default", default, detail))
    return errs


def _taint(taint: object, path: str) -> list[FieldError]:
    if not isinstance(taint, dict):
        return []
    errs = []
    key = str(taint.get("key") or "")
    if not key:
        errs.append(errors.required(f"{path}.key"))
    else:
        errs += messages(f"{path}.key", key, formats.qualified_name(key))
    value = taint.get("value")
    if value:
        errs += messages(f"{path}.value", str(value), formats.label_value(str(value)))
    effect = taint.get("effect")
    if not effect:
        errs.append(errors.required(f"{path}.effect"))
    elif effect not in {"None", "NoSchedule", "NoExecute"}:
        supported = ["NoExecute", "NoSchedule", "None"]
        errs.append(errors.not_supported(f"{path}.effect", effect, supported))
    return errs


def _counter_set(counter_set: object, path: str) -> list[FieldError]:
    if not isinstance(counter_set, dict):
        return []
    errs = dns_label(counter_set.get("name"), f"{path}.name")
    counters = counter_set.get("counters") or {}
    if not counters:
        errs.append(errors.required(f"{path}.counters"))
    if len(counters) > 32:  # noqa: PLR2004
        errs.append(errors.too_many(f"{path}.counters", len(counters), 32))
    return errs


def device_class(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidateDeviceClass``: selectors and config limits."""
    spec = objects.spec(obj)
    errs = selectors(spec.get("selectors"), "spec.selectors")

    def config(item: object, where: str) -> list[FieldError]:
        if not isinstance(item, dict) or item.get("opaque") is None:
            return [errors.required(where, "exactly one of `opaque` is required")]
        return opaque(item["opaque"], f"{where}.opaque", stored=False)

    return errs + each(spec.get("config"), "spec.config", MAX_REQUESTS, config)
