"""DRA device selectors in CEL, evaluated the way kube-scheduler evaluates them.

Like ``k8s.io/dynamic-resource-allocation/cel``, this binds one variable, ``device`` (``driver``,
``allowMultipleAllocations``, and ``attributes`` and ``capacity`` as domain -> id -> value), and
adds Kubernetes' ``semver`` and ``quantity`` libraries, on the Rust ``cel`` crate. It fails closed:
whatever it cannot evaluate raises :class:`CelError`. Each known difference turns a kube-scheduler
match into an error, never the reverse: a domain the device has nothing in is a missing key (an
empty map there); there is no cost limit, ``cel.bind``, optional syntax, quantity ``div`` or
``divInt``, or string or list extension beyond ``lowerAscii``/``upperAscii``.

Converting a device to CEL costs about 35 µs, so :func:`device_variable` returns a value that does
it once; ``matches`` then takes about 0.4 µs for ``device.driver == "…"``, 1.7 µs with an attribute
test, and 8 µs for a semver or quantity comparison, whose helpers run in Python (CPython 3.11).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from dra_driver.api.errors import quote
from dra_driver.k8s.quantity import format_quantity, parse_quantity


def _import_cel() -> tuple[ModuleType, ModuleType]:
    """Import the ``cel`` package's Rust library and its ``stdlib``, not its command line.

    The package's ``__init__`` imports its interactive shell (prompt_toolkit, rich, pygments):
    31 MB in every process that evaluates a selector, for a shell none of ours runs. The
    package is set up without running ``__init__``; what it would export is copied onto it,
    so a later ``import cel`` elsewhere finds the same library (it cannot be loaded twice).
    """
    if "cel" in sys.modules:
        return sys.modules["cel"], importlib.import_module("cel.stdlib")
    spec = importlib.util.find_spec("cel")
    if spec is None:
        raise ImportError("the cel package (common-expression-language) is not installed")
    package = importlib.util.module_from_spec(spec)
    sys.modules["cel"] = package
    library = importlib.import_module("cel.cel")
    package.__dict__.update(
        {name: getattr(library, name) for name in dir(library) if not name.startswith("_")}
    )
    library_stdlib = importlib.import_module("cel.stdlib")
    return package, library_stdlib


if TYPE_CHECKING:
    import cel
    from cel import stdlib
else:
    cel, stdlib = _import_cel()

# resource.k8s.io CELSelectorExpressionMaxLength; the API server counts bytes.
MAX_EXPRESSION_BYTES: Final = 10 * 1024
_INT64_MAX: Final = 2**63 - 1
# Quantities are exact, so quantity("1e999999999") would compute a billion-digit number.
_MAX_QUANTITY_EXPONENT: Final = 1000

# The Rust library cannot hold Python objects, so a version or a quantity is a one-key map. CEL
# compares maps by content, so the key holds a canonical text: versions that compare equal
# (build metadata ignored, as blang/semver's EQ) and quantities that compare equal (1Gi and
# 1024Mi, as Quantity.Equal) get the same text, and == agrees with compareTo.
_SEMVER: Final = "__semver__"
_QUANTITY: Final = "__quantity__"
_ID: Final = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER_SYNTAX: Final = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    rf"(?:-({_ID}(?:\.{_ID})*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)
_EXPONENT: Final = re.compile(r"[eE][+-]?([0-9]+)$")
_canonical: Final = functools.lru_cache(maxsize=1024)(format_quantity)

# The names the library reports for operators and for what its macros expand to, and the
# standard functions it implements natively; tests/structured/test_cel.py runs each one.
_BUILTINS: Final = frozenset({
    "!_", "-_", "_!=_", "_%_", "_&&_", "_*_", "_+_", "_-_", "_/_", "_<=_", "_<_", "_==_", "_>=_",
    "_>_", "_?_:_", "_[_]", "_||_", "@in", "@not_strictly_false", "size", "contains", "startsWith",
    "endsWith", "matches", "int", "uint", "double", "string", "bytes", "dyn", "type", "duration",
    "timestamp", "getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate",
    "getDayOfWeek", "getHours", "getMinutes", "getSeconds", "getMilliseconds",
})  # fmt: skip
# Type names are identifiers the library resolves itself: type(x) == int.
_TYPE_NAMES: Final = frozenset(
    {"bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint"}
)
# The library reports the variable a macro binds (the x in l.all(x, p)) as a free variable.
_MACRO_VARIABLE: Final = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,"
)
_HELPER_FAILURE: Final = re.compile(
    r"Function '(\w+)' error: Python function call failed: \w+: (.*)\. Check ", re.DOTALL
)
_ATTRIBUTE_TYPES: Final[dict[str, type]] = {"int": int, "bool": bool, "string": str, "version": str}
_CEL_TYPE_NAMES: Final[dict[type, str]] = {
    bool: "bool", int: "int", float: "double", str: "string", bytes: "bytes", list: "list",
    dict: "map", type(None): "null",
}  # fmt: skip


class CelError(Exception):
    """A device selector cannot be compiled or evaluated."""


class CelCompileError(CelError):
    """A selector is malformed, too long, or uses something this evaluator does not support."""


class CelEvaluationError(CelError):
    """A selector failed for one device; like kube-scheduler, callers count that as no match."""


class _Version(NamedTuple):
    text: str  # canonical: build metadata dropped, since it never affects precedence
    major: int
    minor: int
    patch: int
    order: tuple[object, ...]


def _normalize_version(text: str) -> str:
    """Port normalizeAndParse of Kubernetes' semver library, behind ``semver(s, true)``."""
    parts = text.removeprefix("v").split(".", 2)
    for index, part in enumerate(parts):
        stripped = part.lstrip("0")
        if len(part) > 1:
            parts[index] = stripped if stripped[:1].isdigit() else "0" + stripped
    # A short version with a prerelease or build part stays invalid once padded, as there.
    return ".".join(parts + ["0"] * (3 - len(parts)))


@functools.lru_cache(maxsize=1024)
def _parse_version(text: str, normalize: bool = False) -> _Version:
    match = _SEMVER_SYNTAX.fullmatch(_normalize_version(text) if normalize else text)
    if match is None:
        raise ValueError(f"{quote(text)} is not a semantic version such as 1.2.3 or 1.2.3-rc.1")
    major, minor, patch = (int(part) for part in match.group(1, 2, 3))
    if max(major, minor, patch) > _INT64_MAX:
        raise ValueError(f"{quote(text)} has a version number beyond the int64 range")
    # semver.org precedence: a release outranks its prereleases; numeric identifiers compare
    # as numbers and below alphanumeric ones; of two lists equal so far the longer one wins.
    pre = match[4].split(".") if match[4] else []
    ids = ((0, int(i), "") if i.isdigit() else (1, 0, i) for i in pre)
    order = (major, minor, patch, *((0, *ids) if pre else (1,)))
    return _Version(match[0].partition("+")[0], major, minor, patch, order)


@functools.lru_cache(maxsize=1024)
def _parse_quantity(text: str) -> Fraction:
    exponent = _EXPONENT.search(text)
    if exponent is not None and int(exponent[1]) > _MAX_QUANTITY_EXPONENT:
        raise ValueError(f"quantity {quote(text)} has an exponent beyond {_MAX_QUANTITY_EXPONENT}")
    return parse_quantity(text)


def _kind(value: object) -> str:
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in (_SEMVER, _QUANTITY):
        return str(next(iter(value))).strip("_")
    return _CEL_TYPE_NAMES.get(type(value), type(value).__name__)


def _no_overload(function: str, *args: object) -> TypeError:
    return TypeError(f"no such overload: {function}({', '.join(_kind(a) for a in args)})")


def _version(value: object, function: str) -> _Version:
    if _kind(value) != "semver" or not isinstance(value, dict):
        raise _no_overload(function, value)
    return _parse_version(str(value[_SEMVER]))


def _quantity(value: object, function: str) -> Fraction:
    if _kind(value) != "quantity" or not isinstance(value, dict):
        raise _no_overload(function, value)
    return _parse_quantity(str(value[_QUANTITY]))


def _text(function: str, text: object, *flag: object) -> tuple[str, bool]:
    if not isinstance(text, str) or len(flag) > 1 or not all(isinstance(f, bool) for f in flag):
        raise _no_overload(function, text, *flag)
    return text, flag == (True,)


def _succeeds(parse: Callable[..., object], *args: object) -> bool:
    try:
        parse(*args)
    except ValueError:
        return False
    return True


def _compare(function: str, receiver: object, other: object) -> int:
    if _kind(receiver) == _kind(other) == "semver":
        left, right = _version(receiver, function).order, _version(other, function).order
        return (left > right) - (left < right)
    if _kind(receiver) == _kind(other) == "quantity":
        low, high = _quantity(receiver, function), _quantity(other, function)
        return (low > high) - (low < high)
    raise _no_overload(function, receiver, other)


def _arithmetic(function: str, receiver: object, other: object) -> dict[str, str]:
    value = _quantity(receiver, function)
    if isinstance(other, int) and not isinstance(other, bool):
        operand = Fraction(other)
    elif _kind(other) == "quantity" and function != "mul":
        operand = _quantity(other, function)
    else:
        raise _no_overload(function, receiver, other)
    result = {"add": value + operand, "sub": value - operand, "mul": value * operand}[function]
    return {_QUANTITY: _canonical(result)}


def _int64(value: object, function: str) -> int:
    # Quantity.AsInt64, whose success isInteger() reports: whole and within int64.
    number = _quantity(value, function)
    if number.denominator != 1 or not -_INT64_MAX - 1 <= number <= _INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return int(number)


_FUNCTIONS: Final[dict[str, Callable[..., object]]] = {
    "semver": lambda t, *n: {_SEMVER: _parse_version(*_text("semver", t, *n)).text},
    "isSemver": lambda t, *n: _succeeds(_parse_version, *_text("isSemver", t, *n)),
    "major": lambda v: _version(v, "major").major,
    "minor": lambda v: _version(v, "minor").minor,
    "patch": lambda v: _version(v, "patch").patch,
    "quantity": lambda t: {_QUANTITY: _canonical(_parse_quantity(_text("quantity", t)[0]))},
    "isQuantity": lambda t: _succeeds(_parse_quantity, _text("isQuantity", t)[0]),
    "isInteger": lambda q: _succeeds(_int64, q, "isInteger"),
    "asInteger": lambda q: _int64(q, "asInteger"),
    "asApproximateFloat": lambda q: float(_quantity(q, "asApproximateFloat")),
    "sign": lambda q: (_quantity(q, "sign") > 0) - (_quantity(q, "sign") < 0),
    "add": lambda q, o: _arithmetic("add", q, o),
    "sub": lambda q, o: _arithmetic("sub", q, o),
    "mul": lambda q, o: _arithmetic("mul", q, o),
    "isGreaterThan": lambda a, b: _compare("isGreaterThan", a, b) == 1,
    "isLessThan": lambda a, b: _compare("isLessThan", a, b) == -1,
    "compareTo": lambda a, b: _compare("compareTo", a, b),
    "lowerAscii": stdlib.lower_ascii,
    "upperAscii": stdlib.upper_ascii,
}


# The library logs a warning whenever a helper raises; matches() reports the same failure as a
# CelEvaluationError, so a selector failing on every device would flood the log with copies.
_DUPLICATE_LOG: Final = re.compile(rf"Python function '(?:{'|'.join(_FUNCTIONS)})' failed")
logging.getLogger("cel").addFilter(lambda record: not _DUPLICATE_LOG.match(record.getMessage()))


def _attribute_value(attribute: object) -> object:
    entries = attribute.items() if isinstance(attribute, Mapping) else {}.items()
    fields = [(k, v) for k, v in entries if v is not None]  # clients may write unset fields as null
    if len(fields) != 1:
        raise ValueError("must hold exactly one value")
    ((kind, value),) = fields
    single = str(kind).removesuffix("s")
    items = value if single != kind else [value]
    if single not in _ATTRIBUTE_TYPES or not isinstance(items, list):
        raise ValueError(f"holds an unsupported value {quote(str(kind))}")
    if any(type(item) is not _ATTRIBUTE_TYPES[single] for item in items):
        raise ValueError(f"{kind} value has the wrong type")
    if single == "version":
        items = [{_SEMVER: _parse_version(item).text} for item in items]
    return items if single != kind else items[0]


def _capacity_value(capacity: object) -> object:
    text = capacity.get("value") if isinstance(capacity, Mapping) else None
    return _FUNCTIONS["quantity"](text if isinstance(text, str) else "")


class _Device(dict[str, Any]):
    """A device's CEL value; it builds its CEL context once, which threads may share."""

    problem: str | None = None
    _context: cel.Context | None = None

    def context(self) -> cel.Context:
        """Return the CEL context binding ``device`` to this value."""
        if self.problem is not None:
            raise ValueError(f"the device cannot be used: {self.problem}")
        # Device values are snapshots, never changed once built, so this cannot go stale.
        if self._context is None:
            self._context = cel.Context({"device": dict(self)}, _FUNCTIONS)
        return self._context

    def __reduce__(self) -> tuple[object, ...]:
        # A CEL context cannot be copied or pickled; a copy builds its own.
        return (_Device, (dict(self),), {"problem": self.problem})


def device_variable(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """Return the CEL value of one ResourceSlice v1 device of ``driver``.

    A value kube-scheduler could not convert (an unknown attribute kind, an invalid version or
    quantity) makes every selector fail for this device, as it does there.
    """
    variable = _Device(driver=driver)
    variable["allowMultipleAllocations"] = device.get("allowMultipleAllocations") is True
    problems = []
    for section, convert in (("attributes", _attribute_value), ("capacity", _capacity_value)):
        values = variable.setdefault(section, {})
        for name, raw in (device.get(section) or {}).items():
            try:
                value = convert(raw)
            except ValueError as exc:
                problems.append(f"{section} {quote(name)}: {exc}")
                continue
            # An unqualified name is in the driver's own domain.
            domain, slash, ident = str(name).partition("/")
            values.setdefault(domain if slash else driver, {})[ident if slash else domain] = value
    variable.problem = "; ".join(problems) or None
    return variable


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled device selector; get one from :func:`compile_selector`."""

    expression: str
    _program: cel.Program = field(repr=False, compare=False)

    def matches(self, device: Mapping[str, Any]) -> bool:
        """Return whether a :func:`device_variable` value matches, or raise CelEvaluationError."""
        try:
            value = device if isinstance(device, _Device) else _Device(device)
            result = self._program.execute(value.context())
        except Exception as exc:
            # The binding raises many built-in types (KeyError, TypeError, RuntimeError, ...);
            # each is a failed evaluation, which must never count as a match.
            helper = _HELPER_FAILURE.match(str(exc))
            detail = f"{helper[1]}(): {helper[2]}" if helper else str(exc)
            detail = f"no such key: {exc}" if isinstance(exc, KeyError) else detail
            raise CelEvaluationError(
                f"CEL selector {quote(self.expression)} failed: {detail}"
            ) from exc
        if isinstance(result, bool):
            return result
        raise CelEvaluationError(
            f"CEL selector {quote(self.expression)} evaluated to {_kind(result)}, want bool"
        )


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector:
    """Compile a selector, or raise :class:`CelCompileError` saying why it cannot be used."""
    if len(expression.encode()) > MAX_EXPRESSION_BYTES:
        raise CelCompileError(f"CEL selector {quote(expression)} is longer than 10 KiB")
    try:
        program = cel.compile(expression)
    except ValueError as exc:
        errors = re.findall(r"ERROR: (<input>:.*)", str(exc))
        raise CelCompileError(
            f"invalid CEL selector {quote(expression)}: {'; '.join(errors) or exc}"
        ) from exc
    for name in program.functions():
        if name not in _BUILTINS and name not in _FUNCTIONS:
            raise CelCompileError(
                f"unsupported function {quote(name)} in CEL selector {quote(expression)}; "
                f"supported Kubernetes helpers: {', '.join(_FUNCTIONS)}"
            )
    allowed = {"device", *_TYPE_NAMES, *_MACRO_VARIABLE.findall(expression)}
    for name in program.variables():
        if name not in allowed:
            raise CelCompileError(
                f"unknown variable {quote(name)} in CEL selector {quote(expression)}; "
                'the only variable is "device"'
            )
    return Selector(expression, program)
