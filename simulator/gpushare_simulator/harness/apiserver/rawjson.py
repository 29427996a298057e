"""JSON text as Go's ``encoding/json`` sees it: value spans, ``Compact`` and ``Marshal``.

A ``runtime.RawExtension`` keeps the bytes of its JSON value, so a faithful fake must know
where each such value starts and ends in a request body (:func:`find`), how Go writes kept
bytes back (:func:`compact`) and how Go writes a decoded value (:func:`encode`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Final

import yaml

Path = tuple[str | int, ...]
Pattern = tuple[str, ...]
"""A path whose ``"*"`` parts match any array index."""
ANY: Final = "*"

_DECODER: Final = json.JSONDecoder()
_SPACE: Final = re.compile(r"[ \t\n\r]*")
_TOKEN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[ \t\n\r]+', re.DOTALL)
# Go escapes these even when it only compacts text, so HTML-embedded JSON stays inert.
_HTML: Final = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_HTML_RE: Final = re.compile("[<>&\u2028\u2029]")
_GO_FLOAT_FIXED: Final = (1e-6, 1e21)
_TRIE_END: Final = ""


class _Trie(dict[str, "_Trie"]):
    """Patterns as a tree of path parts; the key ``""`` marks where a pattern ends."""


def _trie(patterns: Iterable[Pattern]) -> _Trie:
    root = _Trie()
    for pattern in patterns:
        node = root
        for part in pattern:
            node = node.setdefault(part, _Trie())
        node[_TRIE_END] = _Trie()
    return root


def find(text: str, patterns: Iterable[Pattern]) -> dict[Path, str]:
    """Return the exact text of every value at a path matching one of ``patterns``.

    ``text`` must be valid JSON (the caller parsed it already). Of duplicate keys the last one
    counts, as in Go's and Python's decoders.
    """
    found: dict[Path, str] = {}
    _walk(text, _skip(text, 0), _trie(patterns), (), found)
    return found


def _skip(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _end_of(text: str, pos: int) -> int:
    _, end = _DECODER.raw_decode(text, pos)
    return int(end)


def _walk(text: str, pos: int, node: _Trie, path: Path, found: dict[Path, str]) -> int:
    """Record matches in the value at ``pos``; return where that value ends."""
    if _TRIE_END in node:
        end = _end_of(text, pos)
        found[path] = text[pos:end]
        return end
    opening = text[pos]
    if opening == "{" and node:
        return _members(text, pos, node, path, found)
    if opening == "[" and ANY in node:
        return _elements(text, pos, node[ANY], path, found)
    return _end_of(text, pos)


def _members(text: str, pos: int, node: _Trie, path: Path, found: dict[Path, str]) -> int:
    pos = _skip(text, pos + 1)
    if text[pos] == "}":
        return pos + 1
    while True:
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, _skip(text, pos) + 1)  # past the ':'
        child = node.get(key) if key != _TRIE_END else None
        pos = _end_of(text, pos) if child is None else _walk(text, pos, child, (*path, key), found)
        pos = _skip(text, pos)
        if text[pos] == "}":
            return pos + 1
        pos = _skip(text, pos + 1)  # past the ','


def _elements(text: str, pos: int, node: _Trie, path: Path, found: dict[Path, str]) -> int:
    pos = _skip(text, pos + 1)
    if text[pos] == "]":
        return pos + 1
    index = 0
    while True:
        pos = _skip(text, _walk(text, pos, node, (*path, index), found))
        if text[pos] == "]":
            return pos + 1
        pos = _skip(text, pos + 1)
        index += 1


def _escape_html(match: re.Match[str]) -> str:
    return _HTML[match.group(0)]


def _compact_token(match: re.Match[str]) -> str:
    token = match.group(0)
    if token[0] != '"':
        return ""
    return _HTML_RE.sub(_escape_html, token)


def compact(text: str) -> str:
    """Compact ``text`` as ``json.Marshal`` does a ``RawMessage``.

    Insignificant whitespace goes; key order and escapes stay; ``<``, ``>``, ``&``, U+2028
    and U+2029 in strings are escaped.
    """
    return _TOKEN.sub(_compact_token, text)


def go_float(value: float) -> str:
    """Write a float64 as ``encoding/json`` does (``1.0`` → ``1``, ``1e-07`` → ``1e-7``)."""
    magnitude = abs(value)
    if math.isnan(value) or math.isinf(value):
        return json.dumps(value)  # Go cannot encode these; they never come from Go's decoder
    if magnitude != 0 and not _GO_FLOAT_FIXED[0] <= magnitude < _GO_FLOAT_FIXED[1]:
        mantissa, _, exponent = repr(value).partition("e")
        power = int(exponent)
        digits = f"{abs(power):02d}"
        if power < 0 and digits.startswith("0"):
            digits = digits[1:]
        return f"{mantissa.removesuffix('.0')}e{'-' if power < 0 else '+'}{digits}"
    return format(Decimal(repr(value)).normalize(), "f")


def encode(value: object, *, sort_keys: bool, go_numbers: bool) -> str:
    """Compact JSON of a decoded value, strings escaped as Go escapes them.

    ``sort_keys`` is how Go writes a map; ``go_numbers`` writes floats as a float64 (what a
    value that went through ``map[string]interface{}`` becomes), else as Python spells them
    (close to the text they were parsed from).
    """
    if isinstance(value, dict):
        items = sorted(value.items()) if sort_keys else value.items()
        inner = ",".join(
            f"{encode(str(k), sort_keys=sort_keys, go_numbers=go_numbers)}:"
            f"{encode(v, sort_keys=sort_keys, go_numbers=go_numbers)}"
            for k, v in items
        )
        return "{" + inner + "}"
    if isinstance(value, list):
        return (
            "["
            + ",".join(encode(v, sort_keys=sort_keys, go_numbers=go_numbers) for v in value)
            + "]"
        )
    if isinstance(value, float) and go_numbers:
        return go_float(value)
    return compact(json.dumps(value, ensure_ascii=False))


def canonical(value: object) -> str:
    """Return a key for "the same decoded value": key order and ``null`` members do not count.

    The fake strips ``null`` members while decoding a body (Go's typed decoding drops them), so
    a kept text that parses to a value with nulls still stands for the stripped value.
    """
    return json.dumps(strip_nulls(value), sort_keys=True, separators=(",", ":"))


def strip_nulls(value: object) -> object:
    """Return a copy without JSON ``null`` object members (Go decodes them as absent)."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(item) for item in value]
    return value


class _YamlLoader(yaml.SafeLoader):
    """YAML as ``sigs.k8s.io/yaml`` reads it: timestamps stay strings."""


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _json_keys(value: object) -> object:
    if isinstance(value, dict):
        return {_key(k): _json_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_keys(v) for v in value]
    return value


def _key(key: object) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float):
        return go_float(key)
    return "null" if key is None else str(key)


def yaml_to_json(raw: bytes) -> str:
    """``yaml.YAMLToJSON``: the document as Go's ``json.Marshal`` writes it (keys sorted).

    Raises ``yaml.YAMLError`` for a malformed document.
    """
    document = yaml.load(raw, Loader=_YamlLoader)  # noqa: S506 - a SafeLoader subclass
    return encode(_json_keys(document), sort_keys=True, go_numbers=True)
