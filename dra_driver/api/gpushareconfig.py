"""``GpuShareConfig``: the per-claim sharing policy users put into opaque device config.

A config may come from the DeviceClass and from the claim; every field is optional so that the
entries can be merged field by field, and only :meth:`GpuShareConfig.effective` fills in defaults.
The dataclass fields and their metadata (a description and a :mod:`codec <dra_driver.api.fields>`)
are the single description of the format: the decoder, :meth:`GpuShareConfig.to_parameters` and
the JSON Schema are all derived from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from dra_driver.api.fields import BoolCodec, Codec, CoresCodec, EnumCodec, JsonScalar, MemoryCodec

if TYPE_CHECKING:
    from dra_driver.api.driver import DriverNames


class Isolation(StrEnum):
    """How a share's compute limit is enforced."""

    BEST_EFFORT = "best-effort"
    FIXED_SHARE = "fixed-share"
    BURST_SHARE = "burst-share"
    EXCLUSIVE = "exclusive"


class Priority(StrEnum):
    """Which work yields when shares on one card contend."""

    ONLINE = "online"
    OFFLINE = "offline"


class Placement(StrEnum):
    """How shares are spread over the cards of a node."""

    BINPACK = "binpack"
    SPREAD = "spread"


class Backend(StrEnum):
    """The interception layer that enforces the limits inside the container."""

    HAMI_CORE = "hami-core"
    MPS = "mps"
    NONE = "none"


# burst-share guarantees the share without wasting idle compute, and it is HAMi-core's own
# default, so a claim without config gets what users of the library already expect.
DEFAULT_ISOLATION: Final = Isolation.BURST_SHARE
# Offline must be asked for: a claim that says nothing must never be suspended for another.
DEFAULT_PRIORITY: Final = Priority.ONLINE

_CODEC: Final = "codec"
_DESCRIPTION: Final = "description"


def _config_field(codec: Codec, description: str) -> Any:  # noqa: ANN401 - a Field
    """Declare an optional field of the format: unset by default, with its codec and description."""
    return dataclasses.field(default=None, metadata={_CODEC: codec, _DESCRIPTION: description})


_SIZE_NOTE: Final = (
    "For clusters whose API server drops capacity requests (no DRAConsumableCapacity); "
    "a request must not also ask for capacity."
)


@dataclass(frozen=True)
class GpuShareConfig:
    """One opaque config entry; ``None`` means the entry does not set the field."""

    isolation: Isolation | None = _config_field(
        EnumCodec(Isolation),
        "How the claim's compute share is enforced. fixed-share: capped at its cores even "
        "when the card is idle. burst-share: guaranteed its cores and may use idle compute. "
        "best-effort: compute is shared by competition. exclusive: the whole card. Memory "
        f"is always a hard limit. Default: {DEFAULT_ISOLATION}.",
    )
    priority: Priority | None = _config_field(
        EnumCodec(Priority),
        "online work preempts offline work on the same card: offline work is suspended "
        "while online work is busy and resumes after. Memory is never taken from either. "
        f"Default: {DEFAULT_PRIORITY}.",
    )
    placement: Placement | None = _config_field(
        EnumCodec(Placement),
        "How the claim's shares are placed on the cards of a node. binpack: fill the "
        "busiest card that fits. spread: use the least busy card. Default: the "
        "controller's setting.",
    )
    backend: Backend | None = _config_field(
        EnumCodec(Backend),
        "The interception layer that enforces the limits in the container. hami-core: "
        "HAMi-core libvgpu.so. mps: NVIDIA MPS. none: accounting only, nothing is "
        "enforced. Default: the node's setting.",
    )

    cores: int | None = _config_field(
        CoresCodec(),
        "The share's compute, in per cent of the card's SMs (0 to 100), "
        "counted like a cores capacity request. " + _SIZE_NOTE + " Default: 100.",
    )
    memory: int | None = _config_field(
        MemoryCodec(),
        "The share's memory, a whole number of Mi, Gi or Ti (512Mi, 5Gi), "
        "counted like a memory capacity request. " + _SIZE_NOTE + " Default: all of the "
        "card's memory.",
    )
    preemptible: bool | None = _config_field(
        BoolCodec(),
        "Whether an online claim that fits on no card may have this claim's pod evicted to "
        "make room (offline claims only: online work is never evicted). false exempts the "
        "pod. Default: true.",
    )

    def effective(self) -> EffectiveConfig:
        """Fill in the defaults that do not depend on the controller or the node."""
        return EffectiveConfig(
            isolation=DEFAULT_ISOLATION if self.isolation is None else self.isolation,
            priority=DEFAULT_PRIORITY if self.priority is None else self.priority,
            placement=self.placement,
            backend=self.backend,
            cores=self.cores,
            memory=self.memory,
            preemptible=self.preemptible is not False,
        )

    def to_parameters(self, names: DriverNames) -> dict[str, JsonScalar]:
        """Return the opaque ``parameters`` object, with only the fields that are set."""
        parameters: dict[str, JsonScalar] = {
            "apiVersion": names.config_api_version,
            "kind": names.config_kind,
        }
        for field in CONFIG_FIELDS:
            value = getattr(self, field.name)
            if value is not None:
                parameters[field.json_name] = field.codec.encode(value)
        return parameters


@dataclass(frozen=True)
class EffectiveConfig:
    """The merged config with its defaults applied.

    ``placement`` and ``backend`` stay ``None`` when unset: their defaults are settings of the
    controller and of the node, which this package does not know. So do ``cores`` and
    ``memory`` (bytes): unset, the share's size comes from its capacity requests, or is the
    whole card.
    """

    isolation: Isolation
    priority: Priority
    placement: Placement | None
    backend: Backend | None
    cores: int | None = None
    memory: int | None = None
    preemptible: bool = True

    @property
    def preemptible_offline(self) -> bool:
        """Whether an online claim may have this share's pod evicted to make room."""
        return self.priority is Priority.OFFLINE and self.preemptible

    @property
    def sized(self) -> bool:
        """Whether the config itself gives the share's size (``cores`` or ``memory``)."""
        return self.cores is not None or self.memory is not None


@dataclass(frozen=True)
class ConfigField:
    """One optional field of ``GpuShareConfig`` as it appears in JSON."""

    name: str
    json_name: str
    codec: Codec
    description: str


def _camel_case(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


CONFIG_FIELDS: Final = tuple(
    ConfigField(
        name=field.name,
        json_name=_camel_case(field.name),
        codec=field.metadata[_CODEC],
        description=field.metadata[_DESCRIPTION],
    )
    for field in dataclasses.fields(GpuShareConfig)
)


def merge_configs(configs: Iterable[GpuShareConfig]) -> GpuShareConfig:
    """Merge config entries field by field; a later entry's set fields win.

    Pass the DeviceClass entries first and the claim's after them, each in their order.
    """
    merged = GpuShareConfig()
    for config in configs:
        changes = {
            field.name: value
            for field in CONFIG_FIELDS
            if (value := getattr(config, field.name)) is not None
        }
        merged = dataclasses.replace(merged, **changes)
    return merged
