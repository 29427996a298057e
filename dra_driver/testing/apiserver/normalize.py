"""What Go's decode/encode round trip does to a stored object, guided by the schemas.

* quantities are rewritten to their canonical form (``"1000"`` → ``"1k"``);
* empty optional lists and maps disappear (``omitempty``): a patch that removes the last
  finalizer or ``reservedFor`` entry leaves no ``[]`` behind, as on a real server.

Opaque ``RawExtension`` values (``opaque.parameters``) are left exactly as sent.
"""

from __future__ import annotations

from typing import Final

from dra_driver.testing.apiserver.quantity import QuantityError, canonical
from dra_driver.testing.apiserver.schemas import JSON, SchemaSet

_QUANTITY_REF: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"


class Normalizer:
    """Canonical quantities and ``omitempty`` for objects of one schema set."""

    def __init__(self, schemas: SchemaSet) -> None:
        self.schemas = schemas

    def apply(self, obj: JSON, schema: JSON) -> list[str]:
        """Normalize ``obj`` in place; return one decode-error message per bad quantity."""
        problems: list[str] = []
        self._walk(obj, schema, "", problems)
        return problems

    @staticmethod
    def _is_quantity(node: JSON) -> bool:
        ref = node.get("$ref")
        return isinstance(ref, str) and ref.endswith(_QUANTITY_REF)

    def _walk(self, node: object, schema: JSON, path: str, problems: list[str]) -> None:
        resolved = self.schemas.resolve(schema)
        if isinstance(node, dict):
            properties = resolved.get("properties")
            extra = resolved.get("additionalProperties")
            if not isinstance(properties, dict) and not isinstance(extra, dict):
                return  # RawExtension or free-form: keep as sent
            required = resolved.get("required") or ()
            for key, item in list(node.items()):
                child = self.schemas.child(resolved, key)
                if isinstance(properties, dict):
                    where = f"{path}.{key}".lstrip(".")
                else:
                    where = f"{path}[{key}]"
                replacement = self._visit(item, child, where, problems)
                if replacement is not None:
                    node[key] = replacement
                elif item in ([], {}) and key not in required and self._omits(child, item):
                    del node[key]
        elif isinstance(node, list):
            child = self.schemas.items(resolved)
            for index, item in enumerate(node):
                replacement = self._visit(item, child, f"{path}[{index}]", problems)
                if replacement is not None:
                    node[index] = replacement

    def _omits(self, schema: JSON, value: object) -> bool:
        """Whether an empty ``value`` of this field vanishes (lists and maps; never structs)."""
        if value == []:
            return True
        return self.schemas.is_map(schema)

    def _visit(self, item: object, schema: JSON, path: str, problems: list[str]) -> str | None:
        """Return the canonical form of a quantity ``item``; recurse into anything else."""
        if not self._is_quantity(schema):
            if isinstance(item, dict | list) and schema:
                self._walk(item, schema, path, problems)
            return None
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            try:
                return canonical(item)
            except QuantityError as exc:
                problems.append(f"{path}: {exc}")
        return None
