"""The three PATCH formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge.

Strategic merge takes its list semantics from the ``x-kubernetes-patch-strategy`` and
``x-kubernetes-patch-merge-key`` annotations of the bundled OpenAPI schemas, exactly the Go struct
tags the real server uses: lists with strategy ``merge`` and a merge key are merged by that key
(``metadata.ownerReferences`` by ``uid``, ``status.reservedFor`` by ``uid``, ``status.conditions``
by ``type``, ``spec.containers`` by ``name`` ...), ``merge`` lists of scalars (``finalizers``)
are unions, every other list is replaced. Directives: ``$patch: replace|delete|merge``,
``$retainKeys``, ``$deleteFromPrimitiveList/<field>`` and ``$setElementOrder/<field>``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.schemas import JSON, SchemaSet

MERGE: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC: Final = "application/strategic-merge-patch+json"
PATCH_TYPES: Final = (MERGE, JSON_PATCH, STRATEGIC)

_DELETE_PRIMITIVE: Final = "$deleteFromPrimitiveList/"
_ORDER: Final = "$setElementOrder/"


def merge_patch(target: object, patch: object) -> object:
    """Apply an RFC 7386 JSON merge patch (``null`` deletes; lists are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def pointer_parts(path: str) -> list[str]:
    """Return the unescaped reference tokens of a JSON pointer (RFC 6901); "" is the root."""
    if path == "":
        return []
    if not path.startswith("/"):
        raise errors.unprocessable(f'JSON pointer {path!r} must start with "/"')
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _container(doc: object, parts: list[str], path: str) -> object:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise errors.unprocessable(f"doc is missing path: {path}: missing value")
    return node


def _index(node: list[Any], part: str, path: str, *, insert: bool) -> int:
    if insert and part == "-":
        return len(node)
    if not part.isdigit() or int(part) > len(node) - (0 if insert else 1):
        raise errors.unprocessable(f"Unable to access invalid index: {part}: {path}")
    return int(part)


def _get(doc: object, path: str) -> object:
    parts = pointer_parts(path)
    if not parts:
        return doc
    node = _container(doc, parts, path)
    last = parts[-1]
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list):
        return node[_index(node, last, path, insert=False)]
    raise errors.unprocessable(f"doc is missing path: {path}: missing value")


def _remove(doc: object, path: str) -> object:
    parts = pointer_parts(path)
    node = _container(doc, parts, path)
    last = parts[-1] if parts else ""
    if isinstance(node, dict):
        if last not in node:
            raise errors.unprocessable(f"Unable to remove nonexistent key: {last}: missing value")
        return node.pop(last)
    if isinstance(node, list):
        return node.pop(_index(node, last, path, insert=False))
    raise errors.unprocessable(f"doc is missing path: {path}: missing value")


def _add(doc: object, path: str, value: object, *, replace: bool = False) -> object:
    parts = pointer_parts(path)
    if not parts:
        return value
    node = _container(doc, parts, path)
    last = parts[-1]
    if isinstance(node, dict):
        if replace and last not in node:
            raise errors.unprocessable(f"doc is missing key: {path}: missing value")
        node[last] = value
    elif isinstance(node, list):
        if replace:
            node[_index(node, last, path, insert=False)] = value
        else:
            node.insert(_index(node, last, path, insert=True), value)
    else:
        raise errors.unprocessable(f"doc is missing path: {path}: missing value")
    return doc


def _holds(doc: object, path: str, value: object) -> bool:
    """Whether a ``test`` operation passes.

    As in the server's JSON patch library, ``null`` also matches a key its object does not
    have (the object itself must exist).
    """
    parts = pointer_parts(path)
    if value is None and parts:
        node = _container(doc, parts, path)
        if isinstance(node, dict) and parts[-1] not in node:
            return True
    return _get(doc, path) == value


def json_patch(
    target: object,
    operations: object,
    value_hook: Callable[[int, str, object], object] | None = None,
) -> object:
    """Apply an RFC 6902 JSON patch; a failing operation is a 422 like the server's.

    ``value_hook(index, path, value)`` may replace each operation's (private) value first.
    """
    if not isinstance(operations, list):
        raise errors.bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for index, operation in enumerate(operations):
        if not isinstance(operation, dict) or "op" not in operation:
            raise errors.bad_request(f"invalid JSON patch operation: {operation!r}")
        op, path = operation["op"], str(operation.get("path", ""))
        value = copy.deepcopy(operation.get("value"))
        if value_hook is not None:
            value = value_hook(index, path, value)
        if op == "add":
            doc = _add(doc, path, value)
        elif op == "remove":
            _remove(doc, path)
        elif op == "replace":
            doc = _add(doc, path, value, replace=True)
        elif op in {"move", "copy"}:
            source = str(operation.get("from", ""))
            moved = _remove(doc, source) if op == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, moved)
        elif op == "test":
            if not _holds(doc, path, value):
                raise errors.unprocessable(f"testing value {path} failed: test failed")
        else:
            raise errors.unprocessable(f"Unexpected kind: {op}")
    return doc


class StrategicMerge:
    """Strategic merge patch guided by one kind's schema."""

    def __init__(self, schemas: SchemaSet) -> None:
        self.schemas = schemas

    def apply(self, target: JSON, patch: object, schema: JSON) -> JSON:
        """Apply ``patch`` to a copy of ``target``."""
        if not isinstance(patch, dict):
            raise errors.bad_request("strategic merge patch must be a JSON object")
        return self._map(copy.deepcopy(target), patch, schema)

    def _map(self, original: JSON, patch: JSON, schema: JSON) -> JSON:
        directive = patch.get("$patch")
        if directive == "replace":
            return _strip_map({k: v for k, v in patch.items() if k != "$patch"})
        if directive == "delete":
            return {}
        for key, value in patch.items():
            if key.startswith(_DELETE_PRIMITIVE):
                name = key[len(_DELETE_PRIMITIVE) :]
                if isinstance(original.get(name), list) and isinstance(value, list):
                    original[name] = [item for item in original[name] if item not in value]
            elif not (key in {"$patch", "$retainKeys"} or key.startswith(_ORDER)):
                self._field(original, key, value, schema)
        retain = patch.get("$retainKeys")
        if isinstance(retain, list):
            for key in [k for k in original if k not in retain]:
                del original[key]
        return original

    def _field(self, original: JSON, key: str, value: object, schema: JSON) -> None:
        if value is None:
            original.pop(key, None)
            return
        child = self.schemas.child(schema, key)
        current = original.get(key)
        if isinstance(value, dict):
            base = current if isinstance(current, dict) else {}
            original[key] = self._map(base, value, child)
            if value.get("$patch") == "delete":
                original.pop(key, None)
        elif isinstance(value, list):
            original[key] = self._list(current if isinstance(current, list) else [], value, child)
        else:
            original[key] = value

    def _list(self, original: list[Any], patch: list[Any], schema: JSON) -> list[Any]:
        resolved = self.schemas.resolve(schema)
        strategies = str(resolved.get("x-kubernetes-patch-strategy", "")).split(",")
        merge_key = resolved.get("x-kubernetes-patch-merge-key")
        if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
            return _strip_list([i for i in patch if not (isinstance(i, dict) and "$patch" in i)])
        if "merge" not in strategies:
            return _strip_list(patch)
        if not merge_key:
            return original + [item for item in _strip_list(patch) if item not in original]
        item_schema = self.schemas.items(schema)
        result = list(original)
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                raise errors.bad_request(
                    f"map: {item!r} does not contain declared merge key: {merge_key}"
                )
            wanted = item[merge_key]
            position = _find(result, merge_key, wanted)
            if item.get("$patch") == "delete":
                result = [e for e in result if not _keyed(e, merge_key, wanted)]
            elif position is None:
                result.append(self._map({}, item, item_schema))
            else:
                result[position] = self._map(result[position], item, item_schema)
        return result


def _keyed(element: object, key: str, value: object) -> bool:
    return isinstance(element, dict) and element.get(key) == value


def _find(items: list[Any], key: str, value: object) -> int | None:
    for index, element in enumerate(items):
        if _keyed(element, key, value):
            return index
    return None


def _strip(value: object) -> object:
    """Drop patch directives from a value that is taken as a whole."""
    if isinstance(value, dict):
        return _strip_map(value)
    if isinstance(value, list):
        return _strip_list(value)
    return value


def _strip_map(value: JSON) -> JSON:
    return {
        k: _strip(v)
        for k, v in value.items()
        if not (k.startswith("$") and (k in {"$patch", "$retainKeys"} or "/" in k))
    }


def _strip_list(value: list[Any]) -> list[Any]:
    return [_strip(item) for item in value]
