"""Kubernetes resource quantities (``5Gi``, ``30``, ``500m``) as exact fractions.

Capacity arithmetic must be exact: a share of ``1.5Gi`` plus one of ``512Mi`` is exactly
``2Gi`` and must fit a 2 GiB card, which floating point cannot promise.
"""

from __future__ import annotations

import enum
import math
import re
from fractions import Fraction
from typing import Final

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -3, "u": -2, "m": -1, "": 0, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_QUANTITY: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exponent>[eE][+-]?\d+)|(?P<decimal>[numkMGTPE]?))"
)
# A quantity string longer than this is not a real quantity; refusing early bounds the work.
_MAX_LENGTH: Final = 64
# 1e40 is far beyond any device (exa is 1e18); "9e99999" would be a 100,000-digit number that
# costs seconds in every comparison: a request from anyone who can create a claim.
_MAX_EXPONENT: Final = 40


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity; ``problem`` says why, without the string."""

    def __init__(self, text: str, problem: str) -> None:
        super().__init__(f"quantity {text!r} {problem}")
        self.problem = problem


class QuantityRangeError(QuantityError):
    """A well-formed quantity whose exponent is beyond any real amount."""


class QuantityFormat(enum.Enum):
    """How a quantity is written back: ``5Gi`` (binary) or ``5G``/``500m`` (decimal)."""

    BINARY = "BinarySI"
    DECIMAL = "DecimalSI"


def parse_quantity(text: str) -> Fraction:
    """Parse a quantity string exactly; raise :class:`QuantityError` naming the bad value."""
    match = _QUANTITY.fullmatch(text) if len(text) <= _MAX_LENGTH else None
    if match is None:
        raise QuantityError(
            text,
            "must match the Kubernetes quantity format, e.g. '30', '5Gi', '512Mi', '500m' or '1e3'",
        )
    value = Fraction(match["number"])
    if match["binary"]:
        value *= 1024 ** _BINARY[match["binary"]]
    elif match["exponent"]:
        exponent = int(match["exponent"][1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityRangeError(
                text, f"has exponent {exponent}, out of range (-{_MAX_EXPONENT} to {_MAX_EXPONENT})"
            )
        value *= Fraction(10) ** exponent
    else:
        value *= Fraction(1000) ** _DECIMAL[match["decimal"] or ""]
    return -value if match["sign"] == "-" else value


def quantity_format(text: str) -> QuantityFormat:
    """Return the format a quantity was written in, so results can be written alike."""
    return QuantityFormat.BINARY if text.rstrip().endswith("i") else QuantityFormat.DECIMAL


def ceil_int(value: Fraction) -> int:
    """Round up to an integer, as ``Quantity.Value()`` does for capacity arithmetic."""
    return math.ceil(value)


def format_quantity(value: Fraction | int, fmt: QuantityFormat = QuantityFormat.DECIMAL) -> str:
    """Write a quantity canonically: the largest suffix that keeps the number whole.

    ``5368709120`` in binary format is ``5Gi``; ``30`` stays ``30``; ``0.5`` is ``500m``.
    """
    value = Fraction(value)
    sign, value = ("-", -value) if value < 0 else ("", value)
    if value == 0:
        return "0"
    if value.denominator == 1 and fmt is QuantityFormat.BINARY:
        integer = value.numerator
        for suffix, power in sorted(_BINARY.items(), key=lambda item: -item[1]):
            if integer % 1024**power == 0:
                return f"{sign}{integer // 1024**power}{suffix}"
        return f"{sign}{integer}"
    for suffix, power in sorted(_DECIMAL.items(), key=lambda item: -item[1]):
        scaled = value / Fraction(1000) ** power
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{suffix}"
    # Finer than a nanounit: Kubernetes rounds such values up to the next nanounit.
    return f"{sign}{math.ceil(value * 10**9)}n"
