"""Which opaque config entries of an allocation apply to one result, and what they say.

An allocation copies every config that could matter into ``status.allocation.devices.config``
(at most 64 entries, each with its ``source``): the DeviceClass entries
(``FromClass``, one list per allocated request) and the claim's own (``FromClaim``), for every
driver. A driver picks its own by ``opaque.driver`` and by the ``requests`` filter, which may
name the request (``gpu``) or a ``firstAvailable`` alternative (``gpu/small``). The kubelet
plugin and the controller both resolve configs this way, so they can never disagree about a
share's isolation or priority.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dra_driver.api import (
    Backend,
    ConfigError,
    DriverNames,
    GpuShareConfig,
    decode_config,
    merge_configs,
)
from dra_driver.structured.classes import device_entries, driver_requests


def parent_request(request: str) -> str:
    """Return the claim-level request name of a result (``gpu/small`` -> ``gpu``)."""
    return request.split("/", 1)[0]


def applies_to(requests: Iterable[str] | None, request: str) -> bool:
    """Whether a config or constraint whose ``requests`` filter is given covers ``request``."""
    names = list(requests or [])
    return not names or request in names or parent_request(request) in names


def configs_for(
    entries: Sequence[Mapping[str, Any]], driver: str, request: str, *, path: str
) -> list[tuple[str, Any]]:
    """Return ``(field path, parameters)`` of ``driver``'s entries for ``request``.

    Class entries come first, then the claim's, each source in its own order: that is the
    merge order of docs/resource-model.md: class configs before claim configs, and a later
    entry wins over an earlier one, field by field.
    """
    chosen = []
    for index, config in enumerate(entries):
        opaque = config.get("opaque") or {}
        if opaque.get("driver") != driver or not applies_to(config.get("requests"), request):
            continue
        chosen.append((config.get("source", ""), index, opaque.get("parameters")))
    chosen.sort(key=lambda entry: entry[0] != "FromClass")
    return [(f"{path}[{index}].opaque.parameters", parameters) for _, index, parameters in chosen]


def share_config(
    entries: Sequence[Mapping[str, Any]], names: DriverNames, request: str, *, path: str
) -> GpuShareConfig:
    """Decode and merge the config of one result; raise :class:`~dra_driver.api.ConfigError`."""
    return merge_configs(
        decode_config(parameters, names, path=field)
        for field, parameters in configs_for(entries, names.driver, request, path=path)
    )


def chosen_backend(
    claim_spec: Mapping[str, Any], names: DriverNames, classes: Mapping[str, Mapping[str, Any]]
) -> Backend | None:
    """Return the backend a claim spec's configs choose for its requests of our driver.

    ``None`` when they choose none (the node's default applies), when the spec asks for no
    device of ours, or when a config does not decode (whoever validates the claim says why).
    Validation makes every request of a claim choose the same backend, so the first decides.
    """
    requests = driver_requests(claim_spec, classes, names.driver)
    if not requests:
        return None
    entries = [
        entry for _, result, entry in device_entries(claim_spec)
        if parent_request(result) == requests[0]
    ]  # fmt: skip
    device_class = classes.get(str(entries[0].get("deviceClassName", ""))) or {}
    sources = [
        *({**config, "source": "FromClass"} for config in _configs(device_class.get("spec"))),
        *({**config, "source": "FromClaim"} for config in _configs(claim_spec.get("devices"))),
    ]
    try:
        merged = share_config(sources, names, requests[0], path="config")
    except ConfigError:
        return None
    return merged.effective().backend


def _configs(holder: object) -> list[Mapping[str, Any]]:
    configs = holder.get("config") if isinstance(holder, Mapping) else None
    return [c for c in configs if isinstance(c, Mapping)] if isinstance(configs, list) else []
