"""Opaque ``parameters`` as a real server keeps them: the bytes of a ``runtime.RawExtension``.

Go decodes ``opaque.parameters`` into a ``RawExtension`` holding the exact bytes of that value
in the request body; the bytes are stored as they came and compared byte for byte wherever a
field is immutable (a claim's spec, its allocation once set, a template's spec). What a write
stores, per verb (verified on a v1.36 server):

* POST/PUT: the bytes of the body (a YAML body is first converted to JSON, keys sorted);
* JSON patch and merge patch: the current object is encoded to JSON (kept bytes compacted),
  patched and decoded, so untouched values come back compacted; a value an operation sets
  keeps that operation's text, compacted; a value a patch goes into is decoded and re-encoded
  (keys sorted);
* strategic merge patch: the object goes through ``map[string]interface{}``, so every value
  is re-encoded with sorted keys;
* a write to ``/status`` keeps the stored spec and its bytes, a write to the main resource
  keeps the stored status and its bytes.

Responses show the kept bytes compacted (Go's ``json.Marshal`` of a ``RawMessage``: no
whitespace, key order kept, ``<``, ``>`` and ``&`` escaped). The fake keeps each object's texts
in a map from path to text beside the decoded object, whose value at that path is always what
the text decodes to.

Not modelled: a patch that goes *into* a value (a merge patch merging into stored parameters,
a JSON patch operation below them) re-encodes all of it with sorted keys, where Go re-encodes
only the levels it walked; re-encoded numbers and strings are spelled as Python spells them
(``1e3`` becomes ``1000.0``), where Go keeps a JSON or merge patch's leaf text; a mutating
webhook's change is stored compact in value order, not as its patch's text; the 10 KiB limit
is measured on the compact value, not the bytes sent; direct-access writes
(:class:`FakeApiServer` methods taking dicts) have no text, so a create stores Go's compact
form and an update keeps the stored bytes of unchanged values.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.claim_status import IMMUTABLE
from gpushare_simulator.harness.apiserver.errors import FieldError
from gpushare_simulator.harness.apiserver.patch import pointer_parts
from gpushare_simulator.harness.apiserver.rawjson import (
    ANY,
    Path,
    Pattern,
    canonical,
    compact,
    encode,
    find,
)
from gpushare_simulator.harness.apiserver.resources import ResourceType

JSON = dict[str, Any]
Raws = Mapping[Path, str]
EMPTY: Final[Raws] = MappingProxyType({})
_CONFIG: Final = ("config", ANY, "opaque", "parameters")
PATTERNS: Final[Mapping[str, tuple[Pattern, ...]]] = {
    "resourceclaims.resource.k8s.io": (
        ("spec", "devices", *_CONFIG),
        ("status", "allocation", "devices", *_CONFIG),
        ("status", "devices", ANY, "data"),
    ),
    "resourceclaimtemplates.resource.k8s.io": (("spec", "spec", "devices", *_CONFIG),),
    "deviceclasses.resource.k8s.io": (("spec", *_CONFIG),),
}
IMMUTABLE_FIELDS: Final[Mapping[str, tuple[tuple[str, ...], ...]]] = {
    "resourceclaims.resource.k8s.io": (("spec",), ("status", "allocation")),
    "resourceclaimtemplates.resource.k8s.io": (("spec",),),
}
# A token no stored string can hold (NUL and a per-process nonce), replaced after encoding.
_MARK: Final = "\x00" + secrets.token_hex(8) + "-{}\x00"


def patterns(rtype: ResourceType) -> tuple[Pattern, ...]:
    """Where ``rtype`` has RawExtension fields (none for most kinds)."""
    return PATTERNS.get(rtype.key, ())


def client_text(value: object) -> str:
    """Encode a value as a Go client sends one it holds decoded: compact, in its order."""
    return encode(value, sort_keys=False, go_numbers=False)


def patched_text(value: object) -> str:
    """Encode a value a JSON or merge patch went into: it was decoded, so keys are sorted."""
    return encode(value, sort_keys=True, go_numbers=False)


def mapped_text(value: object) -> str:
    """Encode a value that went through ``map[string]interface{}`` (strategic merge)."""
    return encode(value, sort_keys=True, go_numbers=True)


def paths(rtype: ResourceType, obj: object) -> Iterator[tuple[Path, object]]:
    """Every RawExtension path present in ``obj``, with its value."""
    for pattern in patterns(rtype):
        yield from _expand(obj, pattern, ())


def _expand(node: object, pattern: Pattern, path: Path) -> Iterator[tuple[Path, object]]:
    if not pattern:
        yield path, node
        return
    head, rest = pattern[0], pattern[1:]
    if head == ANY and isinstance(node, list):
        for index, item in enumerate(node):
            yield from _expand(item, rest, (*path, index))
    elif isinstance(node, dict) and head in node:
        yield from _expand(node[head], rest, (*path, head))


def _parent(obj: object, path: Path) -> Any:  # noqa: ANN401 - a dict or a list
    node: Any = obj
    for part in path[:-1]:
        node = node[part]
    return node


def _holds(text: str, value: object) -> bool:
    """Whether ``text`` decodes to ``value``."""
    return canonical(json.loads(text)) == canonical(value)


def _mentions(raw: bytes) -> bool:
    """Whether a body may hold a RawExtension value at all (most bodies do not)."""
    return b"parameters" in raw or b"data" in raw


def from_body(rtype: ResourceType, raw: bytes) -> dict[Path, str]:
    """Return the texts of a POST/PUT body's RawExtension values (the body is valid JSON)."""
    found = patterns(rtype)
    if not found or not _mentions(raw):
        return {}
    try:
        return find(raw.decode(), found)
    except (UnicodeDecodeError, ValueError, IndexError):
        return {}  # not plain UTF-8 JSON text: the values get the fallback encoding


def op_values(rtype: ResourceType, raw: bytes) -> dict[int, str]:
    """Return the text of each JSON patch operation's ``value``, by operation index."""
    if not patterns(rtype) or not _mentions(raw):
        return {}
    try:
        found = find(raw.decode(), [(ANY, "value")])
    except (UnicodeDecodeError, ValueError, IndexError):
        return {}
    return {int(path[0]): text for path, text in found.items()}


class RawDict(dict[str, Any]):
    """A decoded RawExtension value that still knows the text it came from.

    Patches move, copy and keep it by reference; a patch that changes its content leaves a text
    that no longer decodes to it, which :func:`collect` notices.
    """

    text: str = ""

    @classmethod
    def of(cls, value: JSON, text: str) -> RawDict:
        """Wrap ``value``, which ``text`` decodes to."""
        wrapped = cls(value)
        wrapped.text = text
        return wrapped


def wrap(rtype: ResourceType, obj: JSON, raws: Raws) -> JSON:
    """Mark ``obj``'s RawExtension values with their kept texts, compacted, as Go encodes them.

    ``obj`` is a private copy; it is changed in place and returned.
    """
    for path, value in list(paths(rtype, obj)):
        if isinstance(value, dict) and path in raws:
            _parent(obj, path)[path[-1]] = RawDict.of(value, compact(raws[path]))
    return obj


def _matches(part: str, pattern_part: str) -> bool:
    if pattern_part == ANY:
        return part.isdigit() or part == "-"
    return part == pattern_part


def op_hook(
    rtype: ResourceType, texts: Mapping[int, str]
) -> Callable[[int, str, object], object] | None:
    """Return a JSON patch value hook marking the RawExtension values in operation values."""
    found = patterns(rtype)
    if not found or not texts:
        return None

    def hook(index: int, pointer: str, value: object) -> object:
        text = texts.get(index)
        if text is None or (pointer and not pointer.startswith("/")):
            return value
        parts = pointer_parts(pointer)
        rests = [
            p[len(parts) :] for p in found if len(parts) <= len(p) and all(map(_matches, parts, p))
        ]
        if () in rests:
            return RawDict.of(value, compact(text)) if isinstance(value, dict) else value
        for path, sub in find(text, rests).items():
            parent = _parent(value, path)
            if isinstance(parent[path[-1]], dict):
                parent[path[-1]] = RawDict.of(parent[path[-1]], compact(sub))
        return value

    return hook


def collect(rtype: ResourceType, obj: object, fallback: Callable[[object], str]) -> dict[Path, str]:
    """Return a patched object's texts: a mark that still holds, else ``fallback``'s."""
    found: dict[Path, str] = {}
    for path, value in paths(rtype, obj):
        if isinstance(value, RawDict) and value.text and _holds(value.text, value):
            found[path] = value.text
        else:
            found[path] = fallback(value)
    return found


def settle(
    rtype: ResourceType,
    obj: JSON,
    incoming: Raws,
    stored: Raws,
    *,
    status_write: bool,
    fallback: Callable[[object], str] = client_text,
) -> Raws:
    """Decide the text of every RawExtension value of an object about to be stored.

    A section the write does not own (the status on a main write, the rest on a status write)
    was copied from the stored object, so its stored texts come first; elsewhere the texts the
    request brought. A text counts only if it still decodes to the value (a webhook may have
    changed it); failing both, ``fallback`` encodes the value. Each value is then replaced by
    what its text decodes to (nulls inside parameters are kept, as Go keeps them).
    """
    if not patterns(rtype):
        return EMPTY
    settled: dict[Path, str] = {}
    for path, value in list(paths(rtype, obj)):
        kept = (path[0] == "status") != status_write
        sources = (stored, incoming) if kept else (incoming, stored)
        candidates = (source.get(path) for source in sources)
        text = next((t for t in candidates if t is not None and _holds(t, value)), None)
        if text is None:
            text = fallback(value)
        else:
            _parent(obj, path)[path[-1]] = json.loads(text)
        settled[path] = text
    return MappingProxyType(settled)


def _within(raws: Raws, prefix: tuple[str, ...]) -> dict[Path, str]:
    return {path: text for path, text in raws.items() if path[: len(prefix)] == prefix}


def _at(obj: JSON, prefix: tuple[str, ...]) -> object:
    node: object = obj
    for part in prefix:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def immutable_errors(
    rtype: ResourceType, old: JSON, new: JSON, old_raws: Raws, new_raws: Raws
) -> list[FieldError]:
    """``field is immutable`` where only kept bytes differ (value changes are the rules' job).

    ``apiequality.Semantic.DeepEqual`` compares a RawExtension's bytes, so the same decoded
    value in other bytes is a change of an immutable field.
    """
    found: list[FieldError] = []
    for prefix in IMMUTABLE_FIELDS.get(rtype.key, ()):
        before, after = _at(old, prefix), _at(new, prefix)
        if before is None or after is None or before != after:
            continue
        if _within(old_raws, prefix) != _within(new_raws, prefix):
            found.append(errors.invalid(".".join(prefix), after, IMMUTABLE))
    return found


def spec_bytes_changed(old_raws: Raws, new_raws: Raws) -> bool:
    """Whether the kept bytes under ``spec`` differ (the spec changed, for ``generation``)."""
    return _within(old_raws, ("spec",)) != _within(new_raws, ("spec",))


def render(body: JSON, raws: Raws, dumps: Callable[[object], str]) -> str:
    """``dumps(body)`` with each RawExtension value written as its kept text, compacted."""
    shown: dict[str, str] = {}
    marked: object = body
    for number, (path, text) in enumerate(raws.items()):
        mark = _MARK.format(number)
        marked = _replaced(marked, path, mark)
        shown[dumps(mark)] = compact(text)
    result = dumps(marked)
    for mark, text in shown.items():
        result = result.replace(mark, text, 1)
    return result


def _replaced(node: object, path: Path, value: object) -> object:
    """Return ``node`` with ``value`` at ``path``, copying only the containers on the way."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict) and isinstance(head, str) and head in node:
        return {**node, head: _replaced(node[head], rest, value)}
    if isinstance(node, list) and isinstance(head, int) and head < len(node):
        return [*node[:head], _replaced(node[head], rest, value), *node[head + 1 :]]
    return node
