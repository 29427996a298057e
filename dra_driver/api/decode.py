"""Strict decoding of ``GpuShareConfig`` from opaque ``parameters``.

The decoder is the webhook's validator and the controller's and node's reader at once, so it
refuses anything the API would not define: a config that validates must mean exactly one thing.
It raises nothing but :class:`ConfigError`, whatever the input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from dra_driver.api.errors import ConfigError, child, quote
from dra_driver.api.fields import JsonNumber, json_type
from dra_driver.api.gpushareconfig import CONFIG_FIELDS, GpuShareConfig

if TYPE_CHECKING:
    from dra_driver.api.driver import DriverNames

# The API server's limit on opaque parameters; checking it here too lets the webhook say so
# before the API server refuses the object with a less specific message.
MAX_PARAMETERS_BYTES: Final = 10 * 1024

# Python's json recurses once per level, and where it gives up differs between versions. A config
# is one level deep, so deeper input is refused up front, the same way on every Python.
MAX_NESTING_DEPTH: Final = 32
_TOO_DEEP: Final = f"nested deeper than {MAX_NESTING_DEPTH} levels"
_STRING_OR_BRACKET: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)

_API_VERSION: Final = "apiVersion"
_KIND: Final = "kind"
_FIELDS_BY_JSON_NAME: Final = {field.json_name: field for field in CONFIG_FIELDS}
_ALLOWED_FIELDS: Final = (_API_VERSION, _KIND, *_FIELDS_BY_JSON_NAME)


class _JsonObject(tuple[tuple[str, object], ...]):
    """A JSON object as its members in document order, duplicates kept so they can be refused."""

    __slots__ = ()


class _NotJsonError(Exception):
    """Raised from inside the parser for input that Python's json accepts but JSON does not."""


def decode_config(
    raw: bytes | str | Mapping[str, object], names: DriverNames, *, path: str = "parameters"
) -> GpuShareConfig:
    """Decode and validate one opaque ``parameters`` object.

    ``raw`` is the JSON text (bytes or str) or an already parsed object; ``path`` prefixes the
    field of every error, so a caller can report the full path of the parameters it checked.
    A ``null`` field is unset, as in the Kubernetes API. Raise :class:`ConfigError`.
    """
    document = _parse(_encode(raw, path), path)
    if not isinstance(document, _JsonObject):
        raise ConfigError.invalid_type(path, "an object", json_type(document))
    members: dict[str, object] = {}
    for key, value in document:
        if key in members:
            raise ConfigError.duplicate_field(child(path, key))
        members[key] = value

    # The version and kind come first: whether the other fields are known depends on them.
    _require_constant(members, _API_VERSION, names.config_api_version, path)
    _require_constant(members, _KIND, names.config_kind, path)
    for key in members:
        if key not in _ALLOWED_FIELDS:
            raise ConfigError.unknown_field(child(path, key), _ALLOWED_FIELDS)

    # Any: each value has its own field's type, which mypy cannot follow through the table.
    values: dict[str, Any] = {}
    for json_name, field in _FIELDS_BY_JSON_NAME.items():
        value = members.get(json_name)
        if value is not None:
            values[field.name] = field.codec.decode(value, child(path, json_name))
    return GpuShareConfig(**values)


def _encode(raw: object, path: str) -> bytes:
    """Return the bytes whose size the API server would limit."""
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        # surrogatepass: a lone surrogate becomes bytes that the UTF-8 check then reports.
        return raw.encode("utf-8", "surrogatepass")
    if isinstance(raw, Mapping) and not isinstance(raw, dict):
        raw = dict(raw)
    try:
        text = json.dumps(raw, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise ConfigError.invalid_json(path, _TOO_DEEP) from None
    except (TypeError, ValueError) as error:
        raise ConfigError.invalid_json(path, f"cannot be encoded as JSON: {error}") from None
    return text.encode("utf-8", "surrogatepass")


def _parse(data: bytes, path: str) -> object:
    if len(data) > MAX_PARAMETERS_BYTES:
        raise ConfigError.too_long(path, len(data), MAX_PARAMETERS_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError.invalid_json(path, f"not valid UTF-8 at byte {error.start}") from None
    if _too_deep(text):
        raise ConfigError.invalid_json(path, _TOO_DEEP)
    try:
        # Numbers stay text: int() of a long digit string raises ValueError (CPython's
        # 4300-digit limit), and a float would lose the difference between 30 and 30.000001.
        return json.loads(
            text,
            object_pairs_hook=_JsonObject,
            parse_int=JsonNumber,
            parse_float=JsonNumber,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as error:
        # Some of CPython's messages end in " at", written to be followed by a position.
        problem = error.msg.removesuffix(" at")
        detail = f"{problem} at line {error.lineno} column {error.colno}"
        raise ConfigError.invalid_json(path, detail) from None
    except _NotJsonError as error:
        raise ConfigError.invalid_json(path, str(error)) from None
    except RecursionError:  # not reached after _too_deep; kept so no input can escape as one
        raise ConfigError.invalid_json(path, _TOO_DEEP) from None


def _too_deep(text: str) -> bool:
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in {"[", "{"}:
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                return True
        elif token in {"]", "}"}:
            depth -= 1
    return False


def _reject_constant(name: str) -> object:
    raise _NotJsonError(f"{name} is not a JSON value")


def _require_constant(members: Mapping[str, object], key: str, expected: str, path: str) -> None:
    field_path = child(path, key)
    value = members.get(key)
    rule = f"must be {quote(expected)}"
    if value is None:
        raise ConfigError.required(field_path, rule)
    if not isinstance(value, str) or isinstance(value, JsonNumber):
        raise ConfigError.invalid_type(field_path, "a string", json_type(value))
    if value != expected:
        raise ConfigError.invalid_value(field_path, value, rule)
