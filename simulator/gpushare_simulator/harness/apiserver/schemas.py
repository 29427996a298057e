"""The Kubernetes OpenAPI schemas bundled with kubernetes-validate, loaded once and cached.

``kubernetes_validate.validate()`` re-reads the 1.6 MB definitions file on every call (~13 ms);
this module loads each version's strict schema set once, keeps one compiled validator per kind,
and lets the strategic-merge-patch code walk the same schemas for the
``x-kubernetes-patch-strategy`` / ``x-kubernetes-patch-merge-key`` annotations.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Final, cast

import jsonschema
from referencing import Registry, Resource

from gpushare_simulator.harness.apiserver.resources import ResourceType

JSON = dict[str, Any]
SUPPORTED_VERSIONS: Final = ("1.34", "1.35", "1.36", "1.37")
_LOCK: Final = threading.Lock()
_REF_PREFIXES: Final = ("#/$defs/", "/api/_definitions.json#/$defs/")


def _schema_dir(kube_version: str) -> Traversable:
    if kube_version not in SUPPORTED_VERSIONS:
        raise ValueError(f"kube_version must be one of {SUPPORTED_VERSIONS}, not {kube_version!r}")
    root = resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    return root.joinpath(f"v{kube_version}.0-local-strict")


def _schema_file_name(rtype: ResourceType) -> str:
    group = rtype.group.split(".", 1)[0]
    suffix = f"{group}-{rtype.version}" if group else rtype.version
    return f"{rtype.kind.lower()}-{suffix}.json"


class SchemaSet:
    """The strict schemas of one Kubernetes minor version."""

    def __init__(self, kube_version: str) -> None:
        self.kube_version = kube_version
        self._dir = _schema_dir(kube_version)
        document = json.loads(self._dir.joinpath("_definitions.json").read_text())
        self.defs: dict[str, JSON] = document["$defs"]
        self._registry: Registry[Any] = Resource.from_contents(document) @ Registry()
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._by_gvk: dict[tuple[str, str, str], str] = {}
        for name, definition in self.defs.items():
            for gvk in definition.get("x-kubernetes-group-version-kind", ()):
                self._by_gvk[(gvk["group"], gvk["version"], gvk["kind"])] = name

    def validator(self, rtype: ResourceType) -> jsonschema.protocols.Validator:
        """Return the compiled strict validator (unknown fields are errors) for ``rtype``."""
        with _LOCK:
            found = self._validators.get(rtype.key)
            if found is None and rtype.custom:
                # kubernetes-validate has no schema of a custom resource: any object decodes.
                found = jsonschema.Draft202012Validator({"type": "object"})
                self._validators[rtype.key] = found
            elif found is None:
                top = json.loads(self._dir.joinpath(_schema_file_name(rtype)).read_text())
                registry = Resource.from_contents(top) @ self._registry
                found = jsonschema.Draft202012Validator(top, registry=registry)
                self._validators[rtype.key] = found
            return found

    def iter_errors(self, rtype: ResourceType, obj: JSON) -> Iterator[jsonschema.ValidationError]:
        """Yield every schema violation of ``obj``."""
        return self.validator(rtype).iter_errors(obj)

    def kind_schema(self, rtype: ResourceType) -> JSON:
        """Return the definition of ``rtype``'s kind (walk it with :meth:`child`, :meth:`items`)."""
        name = self._by_gvk.get((rtype.group, rtype.version, rtype.kind))
        return self.defs[name] if name else {}

    def resolve(self, node: JSON | None) -> JSON:
        """Follow ``$ref`` (and a single-entry ``allOf``) to the definition it names."""
        while node:
            ref = node.get("$ref")
            if isinstance(ref, str):
                for prefix in _REF_PREFIXES:
                    if ref.startswith(prefix):
                        node = self.defs.get(ref[len(prefix) :], {})
                        break
                else:
                    return {}
                continue
            all_of = node.get("allOf")
            if isinstance(all_of, list) and len(all_of) == 1:
                node = all_of[0]
                continue
            return node
        return {}

    def child(self, node: JSON | None, key: str) -> JSON:
        """Return the schema of property ``key`` (or of a map value) under ``node``, unresolved."""
        resolved = self.resolve(node)
        properties = resolved.get("properties")
        if isinstance(properties, dict) and key in properties:
            return cast(JSON, properties[key])
        extra = resolved.get("additionalProperties")
        return cast(JSON, extra) if isinstance(extra, dict) else {}

    def items(self, node: JSON | None) -> JSON:
        """Return the item schema of an array schema."""
        items = self.resolve(node).get("items")
        return cast(JSON, items) if isinstance(items, dict) else {}

    def is_map(self, node: JSON | None) -> bool:
        """Whether ``node`` is a ``map[string]T`` (keys are data, not property names)."""
        resolved = self.resolve(node)
        return "properties" not in resolved and isinstance(
            resolved.get("additionalProperties"), dict
        )


@cache
def _schema_set(kube_version: str) -> SchemaSet:
    return SchemaSet(kube_version)


def schema_set(kube_version: str) -> SchemaSet:
    """Return the cached :class:`SchemaSet` of ``kube_version`` ("1.34".."1.37")."""
    _schema_dir(kube_version)
    with _LOCK:
        return _schema_set(kube_version)
