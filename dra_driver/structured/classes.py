"""Which driver a DeviceClass belongs to, and whether a claim asks for one of its classes.

A class belongs to a driver when one of its selectors can only match that driver's devices:
a top-level ``&&`` term ``device.driver == "<name>"``. That is how DRA drivers' charts write
their classes (this driver's, the upstream example driver's and NVIDIA's). A class without
such a term could match devices of several drivers, so no single driver may claim it:
kube-scheduler allocates those.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
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
    """Return the driver whose devices alone a DeviceClass can select, or ``None``.

    A malformed class (the API server would not store one, but a cache may hold anything)
    belongs to no driver.
    """
    drivers = set()
    spec = device_class.get("spec")
    selectors = spec.get("selectors") if isinstance(spec, dict) else None
    for selector in selectors if isinstance(selectors, list) else []:
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = str(cel.get("expression") or "") if isinstance(cel, dict) else ""
        for term in _top_level_terms(expression):
            match = _DRIVER_TERM.fullmatch(_unwrap(term))
            if match is not None:
                drivers.add(match[2])
    # Two different driver terms can never both hold: such a class selects nothing at all.
    return drivers.pop() if len(drivers) == 1 else None


def only_driver_term(expression: str, driver: str) -> bool:
    """Whether a selector is nothing but ``device.driver == "<driver>"`` (parentheses aside)."""
    match = _DRIVER_TERM.fullmatch(_unwrap(expression.strip()))
    return match is not None and match[2] == driver


def device_entries(claim_spec: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """Yield ``(field path, result name, entry)`` for every way a claim spec asks for devices.

    An entry is a request's ``exactly`` or one of its ``firstAvailable`` alternatives; its path
    is relative to ``spec.devices`` (``requests[0].exactly``, ``requests[1].firstAvailable[0]``)
    and its result name is what an allocation result records (``gpu`` or ``gpu/small``).
    """
    for index, request in enumerate((claim_spec.get("devices") or {}).get("requests") or []):
        if not isinstance(request, dict):
            continue  # not a shape the API server stores; whoever validates says so
        name = str(request.get("name", ""))
        if isinstance(request.get("exactly"), dict):
            yield f"requests[{index}].exactly", name, request["exactly"]
            continue
        for sub_index, sub in enumerate(request.get("firstAvailable") or []):
            if isinstance(sub, dict):
                path = f"requests[{index}].firstAvailable[{sub_index}]"
                yield path, f"{name}/{sub.get('name', '')}", sub


def driver_requests(
    claim_spec: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]], driver: str
) -> tuple[str, ...]:
    """Return the names of the claim spec's requests that ask for a class of ``driver``.

    A request counts when its ``exactly`` or any ``firstAvailable`` alternative does; classes
    missing from ``classes`` count as another driver's.
    """
    requests = []
    for _, result, entry in device_entries(claim_spec):
        device_class = classes.get(str(entry.get("deviceClassName", "")))
        if device_class is not None and class_driver(device_class) == driver:
            requests.append(result.split("/", 1)[0])
    return tuple(dict.fromkeys(requests))


def spec_uses_driver(
    claim_spec: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]], driver: str
) -> bool:
    """Whether a ResourceClaim spec (or a template's ``spec.spec``) asks for a class of ``driver``.

    Classes missing from ``classes`` count as another driver's: nothing is known about them.
    """
    return bool(driver_requests(claim_spec, classes, driver))
