"""Resolve CDI device IDs against the spec files on disk, as a container runtime does.

The result is what the container would get: environment, mounts, device nodes and hooks. A
test can then assert on "the interception layer is told 5 GiB" without a runtime.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path

import yaml

from dra_driver.k8s.objects import Object


class UnresolvableCDIDevicesError(Exception):
    """A CDI ID names no device in any spec: the runtime would refuse to create the container."""


@dataclasses.dataclass
class ContainerEdits:
    """The merged edits a container receives from its CDI devices."""

    env: dict[str, str] = dataclasses.field(default_factory=dict)
    mounts: list[Object] = dataclasses.field(default_factory=list)
    device_nodes: list[Object] = dataclasses.field(default_factory=list)
    hooks: list[Object] = dataclasses.field(default_factory=list)
    cdi_devices: list[str] = dataclasses.field(default_factory=list)

    def apply(self, edits: Object) -> None:
        """Merge one ``containerEdits`` object; a later variable of the same name wins."""
        for entry in edits.get("env") or []:
            key, _, value = entry.partition("=")
            self.env[key] = value
        self.mounts.extend(edits.get("mounts") or [])
        self.device_nodes.extend(edits.get("deviceNodes") or [])
        self.hooks.extend(edits.get("hooks") or [])


def load_specs(cdi_roots: Iterable[Path]) -> dict[str, tuple[Object, Object]]:
    """Map every qualified device name (``vendor/class=name``) to (spec, device)."""
    devices: dict[str, tuple[Object, Object]] = {}
    for root in cdi_roots:
        if not root.is_dir():
            continue
        for path in sorted(root.iterdir()):
            if path.suffix == ".json":
                spec = json.loads(path.read_text())
            elif path.suffix in (".yaml", ".yml"):
                spec = yaml.safe_load(path.read_text())
            else:
                continue
            for device in spec.get("devices") or []:
                devices[f"{spec['kind']}={device['name']}"] = (spec, device)
    return devices


def resolve(cdi_ids: Iterable[str], cdi_roots: Iterable[Path]) -> ContainerEdits:
    """Merge the spec-level and device-level edits of every CDI ID, in order."""
    specs = load_specs(cdi_roots)
    ids = list(cdi_ids)
    missing = [cdi_id for cdi_id in ids if cdi_id not in specs]
    if missing:
        raise UnresolvableCDIDevicesError(f"unresolvable CDI devices {', '.join(missing)}")
    edits = ContainerEdits(cdi_devices=ids)
    applied_specs: set[int] = set()
    for cdi_id in ids:
        spec, device = specs[cdi_id]
        if id(spec) not in applied_specs:
            applied_specs.add(id(spec))
            edits.apply(spec.get("containerEdits") or {})
        edits.apply(device.get("containerEdits") or {})
    return edits
