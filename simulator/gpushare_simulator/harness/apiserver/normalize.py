"""What Go's decode/encode round trip does to a stored object, guided by the schemas.

* quantities are rewritten to their canonical form (``"1000"`` → ``"1k"``);
* times (``metav1.Time``) are rewritten as RFC 3339 in UTC to the second
  (``"2026-01-01T01:00:00+01:00"`` → ``"2026-01-01T00:00:00Z"``): Go parses any offset and
  writes one form, so two spellings of one instant are the same stored value;
* empty optional lists and maps disappear (``omitempty``): a patch that removes the last
  finalizer or ``reservedFor`` entry leaves no ``[]`` behind, as on a real server.

Opaque ``RawExtension`` values (``opaque.parameters``) are left exactly as sent.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from gpushare_simulator.harness.apiserver.quantity import QuantityError, canonical
from gpushare_simulator.harness.apiserver.schemas import JSON, SchemaSet

_QUANTITY_REF: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_TIME_REF: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"


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
    def _refers(node: JSON, name: str) -> bool:
        ref = node.get("$ref")
        return isinstance(ref, str) and ref.endswith(name)

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
        """Return the canonical form of a quantity or time ``item``; recurse into the rest."""
        if self._refers(schema, _TIME_REF):
            return _time(item, path, problems)
        if not self._refers(schema, _QUANTITY_REF):
            if isinstance(item, dict | list) and schema:
                self._walk(item, schema, path, problems)
            return None
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            try:
                return canonical(item)
            except QuantityError as exc:
                problems.append(f"{path}: {exc}")
        return None


def _time(item: object, path: str, problems: list[str]) -> str | None:
    """Return a ``metav1.Time`` as Go writes it back: RFC 3339, UTC, whole seconds."""
    if not isinstance(item, str):
        return None
    try:
        moment = datetime.fromisoformat(item)
    except ValueError:
        problems.append(f'{path}: parsing time "{item}" as RFC 3339: cannot parse')
        return None
    if moment.tzinfo is None:
        problems.append(f'{path}: parsing time "{item}" as RFC 3339: missing time zone')
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
