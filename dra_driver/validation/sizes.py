"""Share sizes given in a ``GpuShareConfig`` (``cores``, ``memory``) rather than capacity requests.

Where the API server drops capacity requests, the config is the only place a claim can size its
share; elsewhere either place works. The webhook holds config sizes to what it holds capacity
requests to (the largest card), and refuses a request sized in both places: the controller
would have to prefer one, and whoever reads the claim could not tell which. The size that
counts is the one the merge keeps (class entries first, then the claim's, a later one winning
field by field), so each message names the entry it came from. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.api import DriverNames, GpuShareConfig
from dra_driver.api.errors import Reason, quote
from dra_driver.api.fields import CORES, MEMORY
from dra_driver.validation.capacity import Limits, invalid, over_largest_card

ONE_PLACE: Final = (
    "give the share's size in one place: either capacity requests or the config's cores and memory"
)


@dataclass(frozen=True)
class Source:
    """One decoded config entry of ours that applies to a request, and where it is written.

    ``field`` is the path of its ``parameters``: in the claim (``spec.devices.config[0]...``)
    or, when ``class_name`` is set, in that DeviceClass (``spec.config[0]...``).
    """

    field: str
    config: GpuShareConfig
    parameters: Mapping[str, Any]
    class_name: str | None = None

    def place(self, name: str) -> str:
        """Say where this entry sets field ``name``."""
        field = f"{self.field}.{name}"
        if self.class_name is None:
            return field
        return f"{field} of DeviceClass {quote(self.class_name)}"


def _winner(sources: Sequence[Source], name: str) -> Source | None:
    """Return the entry whose ``name`` the merge keeps: the last one that sets it."""
    setting = [source for source in sources if getattr(source.config, name) is not None]
    return setting[-1] if setting else None


def size_conflict(entry: Mapping[str, Any], where: str, sources: Sequence[Source]) -> list[str]:
    """Refuse a request with capacity requests whose merged config also sets a size."""
    if not (entry.get("capacity") or {}).get("requests"):
        return []
    sets = [
        f"{name} ({source.place(name)})"
        for name in (CORES, MEMORY)
        if (source := _winner(sources, name)) is not None
    ]
    if not sets:
        return []
    return [
        f"{where}.capacity: {Reason.FORBIDDEN}: the request's GpuShareConfig sets "
        f"{' and '.join(sets)}; {ONE_PLACE}"
    ]


def config_memory_problem(
    sources: Sequence[Source], where: str, names: DriverNames, limits: Limits
) -> list[str]:
    """Refuse a merged config ``memory`` that no card of the cluster has."""
    source = _winner(sources, MEMORY)
    if source is None or source.config.memory is None:
        return []
    problem = over_largest_card(source.config.memory, names, limits)
    if problem is None:
        return []
    # What the user wrote (1024Mi), not the bytes re-encoded (1Gi); the decoder checked it.
    text = quote(str(source.parameters.get(MEMORY)))
    if source.class_name is None:
        return [invalid(f"{source.field}.{MEMORY}", text, problem)]
    return [
        invalid(
            f"{where}.deviceClassName",
            quote(source.class_name),
            f"its config's memory {text} ({source.field}.{MEMORY}) {problem}",
        )
    ]
