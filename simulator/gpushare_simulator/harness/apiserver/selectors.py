"""Label selectors (equality- and set-based) and field selectors, as the API server parses them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.resources import ResourceType

_TOKEN_RE: Final = re.compile(r"==|!=|=|!|\(|\)|,|<|>|[^\s,()=!<>]+")


@dataclass(frozen=True)
class Requirement:
    """One label requirement: ``key <op> values`` (op: exists, !, in, notin, >, <)."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this requirement."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        try:
            number = int(value or "")
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == ">" else number < bound


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``labelSelector``: all requirements must hold."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether an object's labels satisfy the selector."""
        if not self.requirements:
            return True
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(req.matches(labels) for req in self.requirements)


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = _TOKEN_RE.findall(text)
        self.pos = 0

    def error(self, detail: str) -> errors.ApiError:
        return errors.bad_request(f"unable to parse requirement: {detail} in {self.text!r}")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise self.error("unexpected end of selector")
        self.pos += 1
        return token

    def parse(self) -> LabelSelector:
        requirements = []
        while self.peek() is not None:
            requirements.append(self.requirement())
            if self.peek() is not None and self.take() != ",":
                raise self.error("expected ','")
        return LabelSelector(tuple(requirements))

    def key(self) -> str:
        key = self.take()
        if _TOKEN_RE.fullmatch(key) and key in {"==", "!=", "=", "!", "(", ")", ",", "<", ">"}:
            raise self.error(f"expected a label key, found {key!r}")
        return key

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.take()
            return Requirement(self.key(), "!")
        key = self.key()
        op = self.peek()
        if op is None or op == ",":
            return Requirement(key, "exists")
        self.take()
        if op in {"=", "==", "!="}:
            value = "" if self.peek() in {None, ","} else self.take()
            return Requirement(key, "notin" if op == "!=" else "in", (value,))
        if op in {"in", "notin"}:
            if self.take() != "(":
                raise self.error(f"expected '(' after {op}")
            values = []
            while (word := self.take()) != ")":
                if word != ",":
                    values.append(word)
            return Requirement(key, op, tuple(values))
        if op in {">", "<"}:
            value = self.take()
            if not value.lstrip("-").isdigit():
                raise self.error(f"for '{op}', the value must be an integer, not {value!r}")
            return Requirement(key, op, (value,))
        raise self.error(f"unknown operator {op!r}")


SELECTOR_OPERATORS: Final = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
"""A ``metav1.LabelSelector`` expression's operators, and the requirement each one is."""


def object_label_selector(spec: object) -> LabelSelector | None:
    """Read a ``metav1.LabelSelector`` object (``{}``: everything); ``None`` for a bad operator."""
    if not isinstance(spec, dict):
        return LabelSelector()
    requirements = [
        Requirement(str(k), "in", (str(v),)) for k, v in (spec.get("matchLabels") or {}).items()
    ]
    for expression in spec.get("matchExpressions") or []:
        operator = SELECTOR_OPERATORS.get(str(expression.get("operator")))
        if operator is None:
            return None
        values = tuple(str(v) for v in expression.get("values") or ())
        requirements.append(Requirement(str(expression.get("key")), operator, values))
    return LabelSelector(tuple(requirements))


def operator_errors(selector: object, path: str) -> list[errors.FieldError]:
    """Check the operator rules of ``ValidateLabelSelector``: each operator and its values."""
    found: list[errors.FieldError] = []
    expressions = selector.get("matchExpressions") if isinstance(selector, dict) else None
    for index, expression in enumerate(expressions or []):
        where = f"{path}.matchExpressions[{index}]"
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator in {"In", "NotIn"} and not values:
            detail = "must be specified when `operator` is 'In' or 'NotIn'"
            found.append(errors.required(f"{where}.values", detail))
        elif operator in {"Exists", "DoesNotExist"} and values:
            detail = "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            found.append(errors.forbidden(f"{where}.values", detail))
        elif operator not in SELECTOR_OPERATORS:
            detail = "not a valid selector operator"
            found.append(errors.invalid(f"{where}.operator", operator, detail))
    return found


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a ``labelSelector`` query value; malformed input is a 400 BadRequest."""
    if not text.strip():
        return LabelSelector()
    return _LabelParser(text).parse()


@dataclass(frozen=True)
class FieldRequirement:
    """One field requirement: the value at ``path`` equals (or not) ``value``."""

    path: tuple[str, ...]
    value: str
    negate: bool


def field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    """Return the string form of a selectable field (missing is ``""``, booleans lowercase)."""
    node: object = obj
    for part in path:
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed ``fieldSelector``: all requirements must hold."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether an object satisfies the selector."""
        return all(
            (field_value(obj, req.path) == req.value) != req.negate for req in self.requirements
        )


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def parse_field_selector(text: str, rtype: ResourceType) -> FieldSelector:
    """Parse a ``fieldSelector`` for one type; an unsupported label is a 400 like the server's."""
    requirements = []
    for term in (t for t in re.split(r"(?<!\\),", text) if t.strip()):
        match = re.match(r"^\s*([^=!\s]+)\s*(==|=|!=)(.*)$", term)
        if match is None:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        label, op, value = match.groups()
        path = rtype.fields.get(label)
        if path is None:
            raise errors.bad_request(rtype.field_error.format(label=label))
        unescaped = "".join(_split_unescaped(value, "\0"))
        requirements.append(FieldRequirement(tuple(path.split(".")), unescaped, op == "!="))
    return FieldSelector(tuple(requirements))
