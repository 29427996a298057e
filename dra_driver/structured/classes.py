"""Which driver a DeviceClass belongs to.

A class belongs to a driver when one of its selectors can only match that driver's devices:
a top-level ``&&`` term ``device.driver == "<name>"``. That is how every chart writes its
classes (dra-api.md §2.2). A class without such a term could match devices of several drivers,
so no single driver may claim it: kube-scheduler allocates those.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

_DRIVER_TERM: Final = re.compile(r"""device\.driver\s*==\s*(["'])([^"'\\]+)\1""")


def _top_level_terms(expression: str) -> list[str]:
    """Split on ``&&`` outside parentheses, brackets and string literals."""
    terms, depth, quote, start = [], 0, "", 0
    index = 0
    while index < len(expression):
        char = expression[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif expression.startswith("&&", index) and depth == 0:
            terms.append(expression[start:index])
            start = index + 2
            index += 1
        index += 1
    terms.append(expression[start:])
    return [term.strip() for term in terms]


def _unwrap(term: str) -> str:
    while term.startswith("(") and term.endswith(")") and len(_top_level_terms(term[1:-1])) == 1:
        term = term[1:-1].strip()
    return term


def class_driver(device_class: Mapping[str, Any]) -> str | None:
    """Return the driver whose devices alone a DeviceClass can select, or ``None``."""
    drivers = set()
    for selector in (device_class.get("spec") or {}).get("selectors") or []:
        expression = str((selector.get("cel") or {}).get("expression") or "")
        for term in _top_level_terms(expression):
            match = _DRIVER_TERM.fullmatch(_unwrap(term))
            if match is not None:
                drivers.add(match[2])
    # Two different driver terms can never both hold: such a class selects nothing at all.
    return drivers.pop() if len(drivers) == 1 else None
