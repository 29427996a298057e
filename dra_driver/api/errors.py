"""Field errors for the opaque config, worded like the Kubernetes API server's field errors.

Every message has the shape ``<field>: <Reason>[: <detail>]``, e.g.
``parameters.isolation: Unsupported value: "fast": supported values: "best-effort", ...``, so
that a user who reads it from ``kubectl`` sees the same style as the API server's own refusals.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Final

# Values come from users and may be up to 10 KiB: a message (and a log line) shows only the start.
MAX_SHOWN_CHARS: Final = 64

_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Reason(StrEnum):
    """What is wrong with a field, worded like Kubernetes' ``field.ErrorType`` where one fits."""

    UNSUPPORTED_VALUE = "Unsupported value"
    UNKNOWN_FIELD = "Unknown field"
    DUPLICATE_FIELD = "Duplicate field"
    INVALID_TYPE = "Invalid type"
    INVALID_VALUE = "Invalid value"
    REQUIRED_VALUE = "Required value"
    TOO_LONG = "Too long"
    INVALID_JSON = "Invalid JSON"
    FORBIDDEN = "Forbidden"


class ConfigError(ValueError):
    """A ``GpuShareConfig`` was refused.

    ``field`` is the path of the offending field (``parameters.isolation``), ``reason`` says what is
    wrong with it, ``detail`` the rest of the sentence and ``allowed`` the values or field names
    that would have been accepted (empty where that is not a short list). Build one with the
    class methods, which fix the wording.
    """

    def __init__(
        self, field: str, reason: Reason, detail: str = "", *, allowed: tuple[str, ...] = ()
    ) -> None:
        self.field = field
        self.reason = reason
        self.detail = detail
        self.allowed = allowed
        super().__init__(f"{field}: {reason}: {detail}" if detail else f"{field}: {reason}")

    @classmethod
    def unsupported_value(cls, field: str, value: str, allowed: Iterable[str]) -> ConfigError:
        """Refuse ``value``, not one of ``allowed`` (listed sorted, like Kubernetes does)."""
        values = tuple(sorted(allowed))
        detail = f"{quote(value)}: supported values: {_quote_all(values)}"
        return cls(field, Reason.UNSUPPORTED_VALUE, detail, allowed=values)

    @classmethod
    def unknown_field(cls, field: str, allowed: Iterable[str]) -> ConfigError:
        """Refuse a member that the schema does not define."""
        names = tuple(sorted(allowed))
        return cls(
            field, Reason.UNKNOWN_FIELD, f"allowed fields: {_quote_all(names)}", allowed=names
        )

    @classmethod
    def duplicate_field(cls, field: str) -> ConfigError:
        """Refuse a member given twice: JSON parsers disagree on which one wins."""
        return cls(field, Reason.DUPLICATE_FIELD, "may appear only once")

    @classmethod
    def invalid_type(cls, field: str, expected: str, got: str) -> ConfigError:
        """Refuse a JSON type; both are phrases such as ``"a string"`` and ``"number"``."""
        return cls(field, Reason.INVALID_TYPE, f"expected {expected}, got {got}")

    @classmethod
    def invalid_value(cls, field: str, value: str, rule: str) -> ConfigError:
        """Refuse ``value``, which breaks ``rule`` (e.g. ``must be "GpuShareConfig"``)."""
        return cls(field, Reason.INVALID_VALUE, f"{quote(value)}: {rule}")

    @classmethod
    def required(cls, field: str, rule: str) -> ConfigError:
        """Refuse a missing or ``null`` field; ``rule`` says what it must be."""
        return cls(field, Reason.REQUIRED_VALUE, rule)

    @classmethod
    def too_long(cls, field: str, size: int, limit: int) -> ConfigError:
        """Refuse an encoded document of ``size`` bytes, more than ``limit``."""
        return cls(field, Reason.TOO_LONG, f"{size} bytes, must have at most {limit} bytes")

    @classmethod
    def invalid_json(cls, field: str, problem: str) -> ConfigError:
        """Refuse a document that is not JSON (or not JSON this decoder reads)."""
        return cls(field, Reason.INVALID_JSON, problem)


def quote(value: str) -> str:
    """Quote a user-supplied string for a message: JSON-escaped, only its start if it is long."""
    if len(value) > MAX_SHOWN_CHARS:
        return f"{json.dumps(value[:MAX_SHOWN_CHARS])}..."
    return json.dumps(value)


def child(path: str, key: str) -> str:
    """Return the path of member ``key`` of the object at ``path``.

    Keys come from users: a key that is not a plain identifier is shown quoted in brackets, so
    a key such as ``"a.b"`` or one holding a newline cannot forge or garble the path.
    """
    if len(key) <= MAX_SHOWN_CHARS and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{quote(key)}]"


def _quote_all(values: Iterable[str]) -> str:
    return ", ".join(quote(value) for value in values)
