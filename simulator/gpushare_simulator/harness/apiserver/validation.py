"""Admission of a write: decode (strict schema, quantities) then semantic validation.

Order and status codes follow the real server: what Go's decoder refuses (unknown fields under
``fieldValidation=Strict``, wrong JSON types, malformed quantities) is a 400 BadRequest
``<Kind> in version "v1" cannot be handled as a <Kind>: ...``; everything validation refuses is
one 422 Invalid listing every field error as a cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

import jsonschema

from dra_driver.k8s import objects
from gpushare_simulator.harness.apiserver import (
    budgets,
    claim_rules,
    claim_status,
    core_rules,
    dra_rules,
    errors,
    webhook_config,
)
from gpushare_simulator.harness.apiserver.errors import FieldError
from gpushare_simulator.harness.apiserver.gates import FeatureGates
from gpushare_simulator.harness.apiserver.normalize import Normalizer
from gpushare_simulator.harness.apiserver.quantity import decode_error
from gpushare_simulator.harness.apiserver.resources import ResourceType
from gpushare_simulator.harness.apiserver.schemas import JSON, SchemaSet, schema_set

Rule = Callable[[JSON, int], list[FieldError]]
UpdateRule = Callable[[JSON, JSON], list[FieldError]]

CREATE_RULES: Final[dict[str, Rule]] = {
    "pods": core_rules.pod,
    "events": core_rules.core_event,
    "events.events.k8s.io": core_rules.event,
    "leases.coordination.k8s.io": core_rules.lease,
    budgets.KEY: budgets.validate,
    "resourceslices.resource.k8s.io": dra_rules.resource_slice,
    "deviceclasses.resource.k8s.io": dra_rules.device_class,
    "resourceclaims.resource.k8s.io": claim_rules.resource_claim,
    "resourceclaimtemplates.resource.k8s.io": claim_rules.resource_claim_template,
    "mutatingwebhookconfigurations.admissionregistration.k8s.io": webhook_config.validate_mutating,
    "validatingwebhookconfigurations.admissionregistration.k8s.io": (
        webhook_config.validate_validating
    ),
}
UPDATE_RULES: Final[dict[str, UpdateRule]] = {
    "pods": core_rules.pod_update,
    "resourceslices.resource.k8s.io": claim_status.slice_update,
    "resourceclaims.resource.k8s.io": claim_status.claim_update,
    "resourceclaimtemplates.resource.k8s.io": claim_status.template_update,
}
STATUS_RULES: Final[dict[str, UpdateRule]] = {
    "resourceclaims.resource.k8s.io": claim_status.claim_status,
    budgets.KEY: budgets.validate_status,
}
FIELD_VALIDATION: Final = ("Strict", "Warn", "Ignore")


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _is_raw_extension(schema: object) -> bool:
    return (
        isinstance(schema, dict)
        and "properties" not in schema
        and "type" in schema
        and ("object" in schema["type"] and "additionalProperties" not in schema)
    )


class Admission:
    """Decodes and validates objects of one emulated Kubernetes version."""

    def __init__(
        self,
        kube_version: str,
        *,
        enabled: bool = True,
        feature_gates: Mapping[str, bool] | None = None,
    ) -> None:
        self.schemas: SchemaSet = schema_set(kube_version)
        self.minor = int(kube_version.split(".")[1])
        self.gates = FeatureGates(self.minor, feature_gates)
        self.enabled = enabled
        self.normalizer = Normalizer(self.schemas)

    def path(self, rtype: ResourceType, parts: list[Any]) -> str:
        """Render a JSON path the way ``field.Path`` does (map keys in brackets)."""
        node = self.schemas.kind_schema(rtype)
        out = ""
        for part in parts:
            if isinstance(part, int):
                out += f"[{part}]"
                node = self.schemas.items(node)
                continue
            out += f"[{part}]" if self.schemas.is_map(node) else f".{part}"
            node = self.schemas.child(node, part)
        return out.lstrip(".")

    def admit(
        self,
        rtype: ResourceType,
        obj: JSON,
        old: JSON | None = None,
        *,
        subresource: str = "",
        field_validation: str = "Strict",
        raw_errors: Sequence[FieldError] = (),
    ) -> list[str]:
        """Decode ``obj`` in place (canonical quantities, unknown fields) and validate it.

        Raises the 400 of an undecodable body, else the 422 of an invalid object; returns the
        warnings of ``fieldValidation=Warn``. ``raw_errors`` are validation errors found on
        the kept bytes of RawExtension values, reported with the rest.
        """
        problems = self.normalizer.apply(obj, self.schemas.kind_schema(rtype))
        if not self.enabled:
            self.gates.drop_disabled(rtype.key, obj, old)
            return []
        if field_validation not in FIELD_VALIDATION:
            raise errors.bad_request(
                f"fieldValidation must be one of {', '.join(FIELD_VALIDATION)}, "
                f'not "{field_validation}"'
            )
        unknown: list[tuple[list[Any], str]] = []
        errs: list[FieldError] = []
        for error in self.schemas.iter_errors(rtype, obj):
            self._classify(rtype, error, unknown, problems, errs)
        if problems:
            raise decode_error(rtype.kind, rtype.version, "; ".join(problems))
        listed = [f'unknown field "{self.path(rtype, [*p, k])}"' for p, k in unknown]
        if unknown and field_validation == "Strict":
            raise decode_error(
                rtype.kind, rtype.version, f"strict decoding error: {', '.join(listed)}"
            )
        _drop(obj, unknown)
        # Fields of disabled gates exist in the Go types, so they decode, then the strategy drops
        # them before validation; fields unknown to this release failed strict decoding above.
        self.gates.drop_disabled(rtype.key, obj, old)
        self._validate(rtype, obj, old, subresource, errs, extra=list(raw_errors))
        return listed if field_validation == "Warn" else []

    def drop_unknown(self, rtype: ResourceType, obj: JSON) -> None:
        """Drop fields the schema does not declare, as a lenient (non-strict) decode does.

        This is how the server decodes the result of a mutating webhook's patch.
        """
        unknown: list[tuple[list[Any], str]] = []
        for error in self.schemas.iter_errors(rtype, obj):
            if error.validator == "additionalProperties" and isinstance(error.instance, dict):
                declared = (error.schema if isinstance(error.schema, dict) else {}).get(
                    "properties"
                ) or {}
                parts = list(error.absolute_path)
                unknown.extend((parts, key) for key in error.instance if key not in declared)
        _drop(obj, unknown)

    def _classify(
        self,
        rtype: ResourceType,
        error: jsonschema.ValidationError,
        unknown: list[tuple[list[Any], str]],
        problems: list[str],
        errs: list[FieldError],
    ) -> None:
        parts = list(error.absolute_path)
        where = self.path(rtype, parts)
        instance = error.instance
        schema = error.schema if isinstance(error.schema, dict) else {}
        if error.validator == "additionalProperties" and isinstance(instance, dict):
            declared = schema.get("properties") or {}
            unknown.extend((parts, key) for key in instance if key not in declared)
        elif error.validator == "required" and isinstance(instance, dict):
            for key in cast(list[str], error.validator_value):
                if key not in instance:
                    errs.append(errors.required(f"{where}.{key}" if where else key))
        elif error.validator == "enum":
            if where not in {"apiVersion", "kind"}:
                values = cast(list[object], error.validator_value)
                supported = [str(v) for v in values if v is not None]
                errs.append(errors.not_supported(where, instance, supported))
        elif error.validator == "type":
            if not _is_raw_extension(schema):
                expected = error.validator_value
                if isinstance(expected, list):
                    expected = "/".join(t for t in expected if t != "null")
                problems.append(
                    f"json: cannot unmarshal {_json_type(instance)} into Go struct field "
                    f"{where} of type {expected}"
                )
        elif error.validator == "oneOf":
            problems.append(f"{where}: {error.message}")
        else:
            errs.append(errors.invalid(where, instance, error.message))

    def _validate(
        self,
        rtype: ResourceType,
        obj: JSON,
        old: JSON | None,
        subresource: str,
        errs: list[FieldError],
        *,
        extra: list[FieldError],
    ) -> None:
        if subresource != "status":
            errs += core_rules.object_meta(rtype, obj, old)
            rule = CREATE_RULES.get(rtype.key)
            if rule is not None:
                found = rule(obj, self.minor)
                # A rule's Required error (with the server's detail) replaces the bare one the
                # schema's "required" list gave for the same field.
                covered = {e.field for e in found if e.type == "FieldValueRequired"}
                errs[:] = [
                    e for e in errs if not (e.type == "FieldValueRequired" and e.field in covered)
                ]
                errs += found
        if old is not None:
            table = STATUS_RULES if subresource == "status" else UPDATE_RULES
            update_rule = table.get(rtype.key)
            if update_rule is not None:
                errs += update_rule(old, obj)
        errs += extra
        if errs:
            name = str(objects.metadata(obj).get("name", ""))
            raise rtype.invalid(name, errs)


def _drop(obj: JSON, unknown: list[tuple[list[Any], str]]) -> None:
    for parent_path, key in unknown:
        parent: Any = obj
        for part in parent_path:
            parent = parent[part]
        parent.pop(key, None)
