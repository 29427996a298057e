"""Which opaque config entries of an allocation apply to one result, and what they say.

An allocation copies every config that could matter (dra-api.md §2.4): the DeviceClass entries
(``FromClass``, one list per allocated request) and the claim's own (``FromClaim``), for every
driver. A driver picks its own by ``opaque.driver`` and by the ``requests`` filter, which may
name the request (``gpu``) or a ``firstAvailable`` alternative (``gpu/small``). The kubelet
plugin and the controller both resolve configs this way, so they can never disagree about a
share's isolation or priority.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dra_driver.api import DriverNames, GpuShareConfig, decode_config, merge_configs

Object = dict[str, Any]


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
    merge order of DESIGN.md §4 (later entries win, field by field).
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
