"""Value rules of a card's and a node's fields: one converter per kind of field.

The same rules hold for a card NVML reports and one an inventory file describes. A converter
takes whatever NVML, YAML or a caller gave and returns the checked, normalised value, or raises
:class:`FieldValueError` whose text reads ``expected <what is allowed>, got <what was given>``.
The public names are re-exported by :mod:`dra_driver.nvml.inventory`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, TypeVar

from dra_driver.k8s.names import DNS_SUBDOMAIN, MAX_SUBDOMAIN

T = TypeVar("T")

MAX_CARDS_PER_NODE: Final = 128  # the most devices one ResourceSlice may hold
MAX_GENERATED_NODES: Final = 5000  # Kubernetes' documented limit on nodes per cluster
MAX_TEXT_CHARS: Final = 64  # the limit on a string attribute of a ResourceSlice device
MAX_MESSAGE_CHARS: Final = 1024  # the limit on a resource health message (1.36)
MAX_MINOR: Final = 254  # /dev/nvidia255 is /dev/nvidiactl
MAX_BYTES: Final = 2**63 - 1  # a Kubernetes quantity is an int64
_MAX_LABEL: Final = 63  # Kubernetes' limit on label names
_SHOWN_CHARS: Final = 64

_UUID: Final = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PCI: Final = re.compile(r"(?:0000)?([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([01][0-9a-fA-F])\.([0-7])")
_QUANTITY: Final = re.compile(r"([0-9]{1,20})(Ki|Mi|Gi|Ti)?")
_SUFFIXES: Final = {"Ti": 2**40, "Gi": 2**30, "Mi": 2**20, "Ki": 2**10}
_LABEL_NAME: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_COMPUTE_CAPABILITY: Final = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
_DRIVER_VERSION: Final = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,2}")
_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

UUID_RULE: Final = '"GPU-" and a UUID in lowercase hex (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)'
PCI_RULE: Final = 'a PCI bus ID domain:bus:device.function in hex, quoted (e.g. "0000:3b:00.0")'
MEMORY_RULE: Final = (
    "a memory size: a whole number of bytes from 1 to 2^63-1, or a whole number with a binary "
    "suffix Ki, Mi, Gi or Ti such as 80Gi (decimal suffixes such as G are ambiguous and refused)"
)
NAME_RULE: Final = "a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 chars)"
TAINT_EFFECTS: Final = ("NoExecute", "NoSchedule", "PreferNoSchedule")


class FieldValueError(ValueError):
    """A value breaks its field's rule; the text says what is allowed and what was given.

    ``key`` is set when the culprit is one member of a mapping (a label), to extend the path.
    """

    def __init__(self, problem: str, key: str | None = None) -> None:
        super().__init__(problem)
        self.key = key


class Health(StrEnum):
    """Whether a card works, as the kubelet's resource health reports it."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


def describe(value: object) -> str:
    """Name a decoded YAML value for a message: its kind and, for a scalar, the value."""
    if isinstance(value, str):
        shown = json.dumps(value[:_SHOWN_CHARS])
        return f"the string {shown}..." if len(value) > _SHOWN_CHARS else f"the string {shown}"
    if value is None or isinstance(value, bool):
        return "null" if value is None else f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    kinds = ((list | tuple, "a list"), (Mapping, "a mapping"))
    return next(
        (name for kind, name in kinds if isinstance(value, kind)), f"a {type(value).__name__}"
    )


def child(path: str, key: object) -> str:
    """Return the path of member ``key`` of the mapping at ``path``, quoting an odd key."""
    if isinstance(key, str) and len(key) <= _SHOWN_CHARS and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(str(key)[:_SHOWN_CHARS])}]"


def refuse(rule: str, value: object) -> FieldValueError:
    """Return the problem of ``value``, which does not satisfy ``rule``."""
    return FieldValueError(f"expected {rule}, got {describe(value)}")


def _matching(pattern: re.Pattern[str], rule: str, value: object) -> re.Match[str]:
    if isinstance(value, str) and (match := pattern.fullmatch(value)):
        return match
    raise refuse(rule, value)


def integer(low: int, high: int) -> Callable[[object], int]:
    """Return a converter for an integer from ``low`` to ``high``, both included."""
    rule = f"an integer >= {low}" if high >= MAX_BYTES else f"an integer from {low} to {high}"

    def convert(value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        raise refuse(rule, value)

    return convert


def nullable(convert: Callable[[object], T]) -> Callable[[object], T | None]:
    """Return ``convert`` extended to let ``null`` (``None``) through."""
    return lambda value: None if value is None else convert(value)


def boolean(value: object) -> bool:
    """Check a boolean (YAML's ``true`` or ``false``)."""
    if isinstance(value, bool):
        return value
    raise refuse("a boolean (true or false)", value)


def text(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """Check a non-empty printable string of at most ``limit`` characters."""
    if isinstance(value, str) and 0 < len(value) <= limit and value.isprintable():
        return value
    raise refuse(f"a non-empty printable string of at most {limit} characters", value)


def health_message(value: object) -> str:
    """Check the optional message of a card's health."""
    return text(value, MAX_MESSAGE_CHARS)


def gpu_uuid(value: object) -> str:
    """Check a card UUID as NVML reports it: ``GPU-`` and a lowercase UUID."""
    return _matching(_UUID, UUID_RULE, value).group()


def normalize_pci_bus_id(value: object) -> str:
    """Return a PCI bus ID in the form ``0000:3b:00.0``; NVML's ``00000000:3B:00.0`` is accepted.

    Raise :class:`ValueError` (a :class:`FieldValueError`) for anything else.
    """
    domain, bus, device, function = _matching(_PCI, PCI_RULE, value).groups()
    return f"{domain}:{bus}:{device}.{function}".lower()


def parse_quantity(value: object) -> int:
    """Return the bytes of a memory size: ``80Gi``, ``81920Mi``, ``85899345920`` or an int.

    Only binary suffixes (``Ki``, ``Mi``, ``Gi``, ``Ti``) and whole numbers are accepted; the
    size must be at least one byte and fit a Kubernetes quantity (int64). Raise
    :class:`ValueError` (a :class:`FieldValueError`) otherwise.
    """
    if isinstance(value, bool):
        raise refuse(MEMORY_RULE, value)
    if isinstance(value, int):
        size = value
    else:
        digits, suffix = _matching(_QUANTITY, MEMORY_RULE, value).groups()
        size = int(digits) * _SUFFIXES.get(suffix, 1)
    if not 1 <= size <= MAX_BYTES:
        raise refuse(MEMORY_RULE, value)
    return size


def format_quantity(size: int) -> str:
    """Write ``size`` bytes with the largest suffix :func:`parse_quantity` accepts (``80Gi``).

    Not ``dra_driver.k8s.quantity.format_quantity``: that one also writes ``Pi``/``Ei``, which
    inventories refuse, so a dumped inventory would no longer load.
    """
    for suffix, unit in _SUFFIXES.items():
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def compute_capability(value: object) -> str:
    """Check a CUDA compute capability, ``"<major>.<minor>"``, given as a string."""
    rule = 'a quoted "<major>.<minor>" string such as "8.0" (unquoted, YAML reads a number)'
    return _matching(_COMPUTE_CAPABILITY, rule, value).group()


def driver_version(value: object) -> str:
    """Check an NVIDIA driver version such as ``"550.54.15"``, given as a string."""
    rule = 'a quoted version of two or three dot-separated numbers such as "550.54.15"'
    return _matching(_DRIVER_VERSION, rule, value).group()


def health(value: object) -> Health:
    """Check a card's health, ``Healthy`` or ``Unhealthy``."""
    if isinstance(value, str) and value in tuple(Health):
        return Health(value)
    raise refuse('one of "Healthy", "Unhealthy"', value)


def dns_subdomain(value: object) -> str:
    """Check a node name: a DNS subdomain, as Kubernetes requires of Node names."""
    match = _matching(DNS_SUBDOMAIN, NAME_RULE, value)
    if len(match.group()) > MAX_SUBDOMAIN:
        raise refuse(NAME_RULE, value)
    return match.group()


def label_key(value: object) -> str:
    """Check a label or taint key: ``[<DNS subdomain>/]<name>``, the name at most 63 chars."""
    rule = "a label key: an optional DNS subdomain and '/', then a name of at most 63 chars"
    if isinstance(value, str):
        prefix, _, name = value.rpartition("/")
        prefix_ok = not prefix or (len(prefix) <= MAX_SUBDOMAIN and DNS_SUBDOMAIN.fullmatch(prefix))
        if prefix_ok and len(name) <= _MAX_LABEL and _LABEL_NAME.fullmatch(name):
            return value
    raise refuse(rule, value)


def label_value(value: object) -> str:
    """Check a label or taint value: empty, or at most 63 alphanumerics and ``-_.``, quoted."""
    rule = "a label value: a string, empty or at most 63 letters, digits, '-', '_' and '.'"
    if isinstance(value, str) and (
        not value or (len(value) <= _MAX_LABEL and _LABEL_NAME.fullmatch(value))
    ):
        return value
    raise refuse(rule, value)


def taint_effect(value: object) -> str:
    """Check a taint effect, one of Kubernetes' three."""
    if isinstance(value, str) and value in TAINT_EFFECTS:
        return value
    raise refuse("one of " + ", ".join(f'"{effect}"' for effect in TAINT_EFFECTS), value)


def labels(value: object) -> dict[str, str]:
    """Check a mapping of label keys to label values; the problem names the bad key."""
    if not isinstance(value, Mapping):
        raise refuse("a mapping of label keys to label values", value)
    checked = {}
    for key, item in value.items():
        try:
            checked[label_key(key)] = label_value(item)
        except FieldValueError as problem:
            raise FieldValueError(str(problem), key=str(key)) from None
    return checked


@dataclass(frozen=True)
class CardField:
    """How one card field is written in YAML, which attribute holds it and its rule."""

    yaml_name: str
    attribute: str
    convert: Callable[[object], object]
    required: bool = True
    # Not given by a card template: count and generate assign it per card.
    per_card: bool = False


CARD_FIELDS: Final = (
    CardField("uuid", "uuid", gpu_uuid, per_card=True),
    CardField("productName", "product_name", text),
    CardField("memory", "memory_bytes", parse_quantity),
    CardField("pciBusID", "pci_bus_id", normalize_pci_bus_id, per_card=True),
    CardField("minor", "minor", integer(0, MAX_MINOR), per_card=True),
    CardField("index", "index", integer(0, MAX_CARDS_PER_NODE - 1), per_card=True),
    CardField("numaNode", "numa_node", nullable(integer(0, 4095)), required=False),
    CardField("architecture", "architecture", text),
    CardField("cudaComputeCapability", "cuda_compute_capability", compute_capability),
    CardField("driverVersion", "driver_version", driver_version),
    CardField("health", "health", health, required=False),
    CardField("healthMessage", "health_message", nullable(health_message), required=False),
)
