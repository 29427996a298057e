"""How each ``GpuShareConfig`` field is read from JSON, written back, and described in the schema.

One codec per kind of field: an enum (isolation, priority, placement, backend), a size (cores,
memory) or a switch (preemptible). The decoder, :meth:`GpuShareConfig.to_parameters` and the
JSON Schema all go through the codec, and a test checks that the schema and the decoder accept
the same documents, so each codec's ``schema`` must say exactly what its ``decode`` accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Final, Protocol

from dra_driver.api.errors import ConfigError

CORES: Final = "cores"
"""The capacity of a card's compute, in per cent of its SMs: 100."""
MEMORY: Final = "memory"
"""The capacity of a card's memory, in bytes."""
MAX_CORES: Final = 100
MIB: Final = 1024**2
"""Memory is handed out in whole MiB."""
_UNITS: Final = {"Mi": MIB, "Gi": 1024**3, "Ti": 1024**4}
_CORES_TEXT: Final = r"^(0|[1-9][0-9]?|100)$"
_MEMORY_TEXT: Final = r"^[1-9][0-9]{0,6}(Mi|Gi|Ti)$"


JsonScalar = str | bool
"""What ``to_parameters`` writes for one field: text, or a JSON boolean."""


class JsonNumber(str):
    """A JSON number as its text: the decoder never turns numbers into floats or huge ints."""

    __slots__ = ()


class Codec(Protocol):
    """Reads one field's JSON value, writes it back, and describes it for the JSON Schema."""

    def decode(self, value: object, path: str) -> object:
        """Return the field's value; raise :class:`ConfigError` naming ``path``."""

    def encode(self, value: object) -> JsonScalar:
        """Return the JSON value ``to_parameters`` writes for a decoded value."""

    def schema(self) -> dict[str, object]:
        """Return the field's JSON Schema, ``null`` (unset) included."""


def json_type(value: object) -> str:
    """Name the JSON type of a parsed value the way JSON Schema does."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, JsonNumber | int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, tuple | dict):
        return "object"
    return "array"


@dataclass(frozen=True)
class EnumCodec:
    """A string that must be one of an enum's values."""

    enum: type[StrEnum]

    def decode(self, value: object, path: str) -> object:
        """Return the enum member named by ``value``."""
        if not isinstance(value, str) or isinstance(value, JsonNumber):
            raise ConfigError.invalid_type(path, "a string", json_type(value))
        try:
            return self.enum(value)
        except ValueError:
            allowed = (str(member) for member in self.enum)
            raise ConfigError.unsupported_value(path, value, allowed) from None

    def encode(self, value: object) -> str:
        """Return the member's value."""
        return str(value)

    def schema(self) -> dict[str, object]:
        """Return the enum's values in declaration order, plus null."""
        return {
            "type": ["string", "null"],
            "enum": [*(str(member) for member in self.enum), None],
        }


class CoresCodec:
    """A whole number of per cent of the card's SMs, written as a number or a string."""

    RULE: Final = (
        f"must be a whole number from 0 to {MAX_CORES} (per cent of the card's SMs), "
        'such as 30 or "30"'
    )

    def decode(self, value: object, path: str) -> object:
        """Return the cores as an int from 0 to 100."""
        if isinstance(value, JsonNumber):
            try:
                number = Decimal(value)
            except InvalidOperation:  # not reached: the JSON parser made the text
                raise ConfigError.invalid_value(path, value, self.RULE) from None
            # Compared before int(): "1e999999" would otherwise become a million-digit int.
            if 0 <= number <= MAX_CORES and number == number.to_integral_value():
                return int(number)
            raise ConfigError.invalid_value(path, value, self.RULE)
        if isinstance(value, str):
            if re.fullmatch(_CORES_TEXT, value):
                return int(value)
            raise ConfigError.invalid_value(path, value, self.RULE)
        raise ConfigError.invalid_type(path, "a number or a string", json_type(value))

    def encode(self, value: object) -> str:
        """Return the cores as decimal text."""
        return str(value)

    def schema(self) -> dict[str, object]:
        """Return an integer from 0 to 100, or its decimal text."""
        return {
            "type": ["integer", "string", "null"],
            "minimum": 0,
            "maximum": MAX_CORES,
            "pattern": _CORES_TEXT,
        }


class MemoryCodec:
    """A whole number of MiB, GiB or TiB, written as a quantity string (``512Mi``, ``5Gi``)."""

    RULE: Final = "must be a whole number of Mi, Gi or Ti (at least 1Mi), such as 512Mi or 5Gi"

    def decode(self, value: object, path: str) -> object:
        """Return the memory in bytes."""
        if not isinstance(value, str) or isinstance(value, JsonNumber):
            raise ConfigError.invalid_type(path, "a string", json_type(value))
        if not re.fullmatch(_MEMORY_TEXT, value):
            raise ConfigError.invalid_value(path, value, self.RULE)
        return int(value[:-2]) * _UNITS[value[-2:]]

    def encode(self, value: object) -> str:
        """Return the bytes in the largest unit that divides them."""
        amount = int(str(value))
        for unit, size in reversed(_UNITS.items()):
            if amount % size == 0:
                return f"{amount // size}{unit}"
        raise ValueError(f"{amount} bytes is not a whole number of MiB")

    def schema(self) -> dict[str, object]:
        """Return a string of a whole number of Mi, Gi or Ti."""
        return {"type": ["string", "null"], "pattern": _MEMORY_TEXT}


@dataclass(frozen=True)
class BoolCodec:
    """A JSON boolean; strings such as ``"false"`` are refused, as a structural schema would."""

    def decode(self, value: object, path: str) -> object:
        """Return the boolean."""
        if not isinstance(value, bool):
            raise ConfigError.invalid_type(path, "a boolean (true or false)", json_type(value))
        return value

    def encode(self, value: object) -> JsonScalar:
        """Return the boolean itself."""
        return bool(value)

    def schema(self) -> dict[str, object]:
        """Return a boolean, plus null."""
        return {"type": ["boolean", "null"]}
