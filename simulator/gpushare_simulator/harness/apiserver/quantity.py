"""Kubernetes ``resource.Quantity``: parsing, and the canonical form the server stores.

The real API server re-serializes every quantity canonically (``"1000"`` becomes ``"1k"``,
``"1024Mi"`` becomes ``"1Gi"``, ``"0.5"`` becomes ``"500m"``); a driver that compares quantity
strings instead of values breaks on a real cluster, so the fake does the same.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

from gpushare_simulator.harness.apiserver import errors

QUANTITY_REGEX: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_NUMBER_RE: Final = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15}
_DECIMAL["E"] = 18
_DECIMAL_SUFFIX: Final = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_BINARY_SUFFIX: Final = {power: suffix for suffix, power in _BINARY.items()}


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity."""


def parse(text: str | float) -> tuple[Fraction, str]:
    """Return ``(value, format)``; format is ``BinarySI``, ``DecimalSI`` or ``DecimalExponent``."""
    raw = str(text).strip() if not isinstance(text, str) else text
    match = _NUMBER_RE.match(raw)
    if not raw or match is None or not re.match(QUANTITY_REGEX, raw):
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_REGEX}'")
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * 1024 ** _BINARY[suffix], "BinarySI"
    if suffix in _DECIMAL:
        return number * Fraction(10) ** _DECIMAL[suffix], "DecimalSI"
    exponent = re.fullmatch(r"[eE]([-+]?[0-9]+)", suffix)
    if exponent is None:
        raise QuantityError("unable to parse quantity's suffix")
    return number * Fraction(10) ** int(exponent.group(1)), "DecimalExponent"


def value(text: str | float) -> Fraction:
    """Return the exact value of a quantity."""
    return parse(text)[0]


def canonical(text: str | float) -> str:
    """Return the canonical string the API server stores for ``text``."""
    amount, fmt = parse(text)
    nanos = math.ceil(amount * 10**9) if amount >= 0 else -math.ceil(-amount * 10**9)
    if nanos == 0:
        return "0"
    amount = Fraction(nanos, 10**9)
    if fmt == "BinarySI" and (abs(amount) < 1024 or amount.denominator != 1):  # noqa: PLR2004
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        mantissa, power = int(amount), 0
        while mantissa % 1024 == 0 and power < max(_BINARY_SUFFIX):
            mantissa //= 1024
            power += 1
        return f"{mantissa}{_BINARY_SUFFIX[power]}"
    mantissa, exponent = nanos, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    if fmt == "DecimalSI" and exponent in _DECIMAL_SUFFIX:
        return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"
    return f"{mantissa}e{exponent}" if exponent else str(mantissa)


def decode_error(kind: str, version: str, detail: str) -> errors.ApiError:
    """Return the 400 the server gives for a body it cannot decode into ``kind``."""
    return errors.bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}'
    )
