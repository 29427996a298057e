"""Check a CDI spec document the way a container runtime's CDI loader would, and stricter.

:func:`validate_spec` returns every violation, each as ``<path>: <problem>`` (for example
``devices[0].containerEdits.env[1]: "1X=y": the name must match [A-Za-z_][A-Za-z0-9_]*``), so
a test shows all that is wrong with a produced file at once. The rules follow
``tags.cncf.io/container-device-interface`` (strict decoding, ``parser``, ``ValidateEnv``,
``DeviceNode.Validate``, ``specs-go/version.go``) and add this driver's own: absolute paths
without ``..`` and environment entries with a valid name and no control characters.
:func:`required_version` is CDI's ``MinimumRequiredVersion`` for the features used here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from dra_driver.api.errors import quote

# Spec versions a CDI loader knows; older runtimes know fewer, so emit the minimum needed.
KNOWN_VERSIONS: Final = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST_VERSION: Final = "0.3.0"

TOP_LEVEL_FIELDS: Final = frozenset(
    {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
)
DEVICE_FIELDS: Final = frozenset({"name", "annotations", "containerEdits"})
EDITS_FIELDS: Final = frozenset(
    {"env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt", "netDevices"}
)
DEVICE_NODE_FIELDS: Final = frozenset(
    {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
)
MOUNT_FIELDS: Final = frozenset({"hostPath", "containerPath", "type", "options"})
HOOK_FIELDS: Final = frozenset({"hookName", "path", "args", "env", "timeout"})
HOOK_NAMES: Final = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
DEVICE_NODE_TYPES: Final = frozenset({"b", "c", "u", "p"})

_VENDOR_OR_CLASS: Final = re.compile(r"[A-Za-z](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DEVICE_NAME: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.:]*[A-Za-z0-9])?")
_LETTER: Final = re.compile(r"[A-Za-z]")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")

Problems = list[str]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _device_list(doc: Mapping[str, Any]) -> list[Any]:
    devices = doc.get("devices")
    return devices if isinstance(devices, list) else []


def _edits_of(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    edits = [d.get("containerEdits") for d in _device_list(doc) if isinstance(d, Mapping)]
    edits.append(doc.get("containerEdits"))
    return [e for e in edits if isinstance(e, Mapping)]


def _items(edits: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = edits.get(key)
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def required_version(doc: Mapping[str, Any]) -> str:
    """Return the lowest CDI version that has every feature ``doc`` uses (CDI's own rules)."""
    edits = _edits_of(doc)
    devices = _device_list(doc)
    if any(e.get("netDevices") for e in edits):
        return "1.1.0"
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits):
        return "0.7.0"
    kind = doc.get("kind")
    dotted_class = isinstance(kind, str) and "." in kind.partition("/")[2]
    annotated = bool(doc.get("annotations")) or any(
        isinstance(d, Mapping) and d.get("annotations") for d in devices
    )
    if dotted_class or annotated:
        return "0.6.0"
    # 0.5.0 added deviceNodes[].hostPath and device names that start with a digit.
    digit_first = any(
        isinstance(d, Mapping)
        and isinstance(d.get("name"), str)
        and not _LETTER.fullmatch(d["name"][:1])
        for d in devices
    )
    if digit_first or any(n.get("hostPath") for e in edits for n in _items(e, "deviceNodes")):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in _items(e, "mounts")):
        return "0.4.0"
    return EARLIEST_VERSION


def _fields(where: str, obj: Mapping[str, Any], allowed: frozenset[str]) -> Problems:
    return [f"{where}: unknown field {quote(str(key))}" for key in obj if key not in allowed]


def _path(where: str, value: object, *, required: bool = True) -> Problems:
    if value is None and not required:
        return []
    if not isinstance(value, str) or not value:
        return [f"{where}: must be a non-empty string"]
    problems = []
    if not value.startswith("/"):
        problems.append(f"{where}: {quote(value)}: must be an absolute path")
    if ".." in value.split("/"):
        problems.append(f"{where}: {quote(value)}: must not contain a '..' segment")
    if _CONTROL.search(value):
        problems.append(f"{where}: {quote(value)}: must not contain control characters")
    return problems


def _env(where: str, value: object) -> Problems:
    if not isinstance(value, list):
        return [f"{where}: must be a list of strings"]
    problems = []
    seen: set[str] = set()
    for i, entry in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(entry, str):
            problems.append(f"{at}: must be a string KEY=VALUE")
            continue
        key, sep, val = entry.partition("=")
        if not sep:
            problems.append(f"{at}: {quote(entry)}: must be KEY=VALUE")
        elif not _ENV_NAME.fullmatch(key):
            problems.append(f"{at}: {quote(entry)}: the name must match [A-Za-z_][A-Za-z0-9_]*")
        elif _CONTROL.search(val):
            problems.append(f"{at}: {quote(entry)}: the value must not contain control characters")
        elif key in seen:
            problems.append(f"{at}: {quote(entry)}: {key} is set twice")
        seen.add(key)
    return problems


def _list_of(
    where: str, value: object, check: Callable[[str, Mapping[str, Any]], Problems]
) -> Problems:
    if not isinstance(value, list):
        return [f"{where}: must be a list"]
    problems = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping):
            problems += check(f"{where}[{i}]", item)
        else:
            problems.append(f"{where}[{i}]: must be an object")
    return problems


def _device_node(where: str, node: Mapping[str, Any]) -> Problems:
    problems = _fields(where, node, DEVICE_NODE_FIELDS)
    problems += _path(f"{where}.path", node.get("path"))
    problems += _path(f"{where}.hostPath", node.get("hostPath"), required=False)
    permissions = node.get("permissions", "")
    if not isinstance(permissions, str) or (
        permissions != "none" and permissions.strip("rwm") != ""
    ):
        problems.append(f"{where}.permissions: must be made of r, w and m, or be none")
    kind = node.get("type", "")
    if kind not in DEVICE_NODE_TYPES and kind != "":
        problems.append(f"{where}.type: must be one of b, c, u, p")
    for key in ("major", "minor"):
        number = node.get(key, 0)
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            problems.append(f"{where}.{key}: must be a non-negative integer")
    return problems


def _mount(where: str, mount: Mapping[str, Any]) -> Problems:
    problems = _fields(where, mount, MOUNT_FIELDS)
    problems += _path(f"{where}.hostPath", mount.get("hostPath"))
    problems += _path(f"{where}.containerPath", mount.get("containerPath"))
    options = mount.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) and o for o in options):
        problems.append(f"{where}.options: must be a list of non-empty strings")
    return problems


def _hook(where: str, hook: Mapping[str, Any]) -> Problems:
    problems = _fields(where, hook, HOOK_FIELDS)
    if hook.get("hookName") not in HOOK_NAMES:
        problems.append(f"{where}.hookName: must be one of {', '.join(sorted(HOOK_NAMES))}")
    problems += _path(f"{where}.path", hook.get("path"))
    if "env" in hook:
        problems += _env(f"{where}.env", hook["env"])
    return problems


def _edits(where: str, edits: object, *, device: bool) -> Problems:
    if not isinstance(edits, Mapping):
        return [f"{where}: must be an object"]
    problems = _fields(where, edits, EDITS_FIELDS)
    if "env" in edits:
        problems += _env(f"{where}.env", edits["env"])
    if "deviceNodes" in edits:
        problems += _list_of(f"{where}.deviceNodes", edits["deviceNodes"], _device_node)
    if "mounts" in edits:
        problems += _list_of(f"{where}.mounts", edits["mounts"], _mount)
    if "hooks" in edits:
        problems += _list_of(f"{where}.hooks", edits["hooks"], _hook)
    if device and not any(edits.get(key) for key in EDITS_FIELDS):
        problems.append(f"{where}: a device must have at least one edit")
    return problems


def _kind(kind: object) -> Problems:
    if not isinstance(kind, str):
        return ["kind: must be a string <vendor>/<class>"]
    vendor, sep, cls = kind.partition("/")
    if not sep:
        return [f"kind: {quote(kind)}: must be <vendor>/<class>"]
    rule = 'start with a letter, end with a letter or digit, and hold only those and "_-."'
    return [
        f"kind: {quote(kind)}: the {part} {quote(text)} must {rule}"
        for part, text in (("vendor", vendor), ("class", cls))
        if not _VENDOR_OR_CLASS.fullmatch(text)
    ]


def _devices(devices: object) -> Problems:
    if not isinstance(devices, list) or not devices:
        return ["devices: must be a non-empty list"]
    return _list_of("devices", devices, functools.partial(_device, set()))


def _device(names: set[str], where: str, device: Mapping[str, Any]) -> Problems:
    """Check one device; ``names`` holds the names of the devices before it, and gets this one's."""
    problems = _fields(where, device, DEVICE_FIELDS)
    name = device.get("name")
    if not isinstance(name, str) or not _DEVICE_NAME.fullmatch(name):
        shown = quote(name) if isinstance(name, str) else repr(name)
        problems.append(
            f"{where}.name: {shown}: must hold only letters, digits and "
            '"_-.:", and start and end with a letter or digit'
        )
    elif name in names:
        problems.append(f"{where}.name: {quote(name)}: defined twice")
    else:
        names.add(name)
    problems += _edits(f"{where}.containerEdits", device.get("containerEdits"), device=True)
    return problems


def validate_spec(doc: object) -> list[str]:
    """Return every rule ``doc`` breaks as a CDI spec; an empty list means it is valid."""
    if not isinstance(doc, Mapping):
        return ["spec: must be an object"]
    problems = _fields("spec", doc, TOP_LEVEL_FIELDS)
    version = doc.get("cdiVersion")
    if version not in KNOWN_VERSIONS:
        shown = quote(version) if isinstance(version, str) else repr(version)
        problems.append(f"cdiVersion: {shown}: must be one of {', '.join(KNOWN_VERSIONS)}")
    else:
        needed = required_version(doc)
        if _version_key(needed) > _version_key(version):
            problems.append(f"cdiVersion: {quote(version)}: the features used need {needed}")
    problems += _kind(doc.get("kind"))
    problems += _devices(doc.get("devices"))
    if "containerEdits" in doc:
        problems += _edits("containerEdits", doc["containerEdits"], device=False)
    return problems
