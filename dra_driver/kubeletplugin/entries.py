"""What the kubelet plugin checkpoints of a prepared claim: the answer it gave, and why.

A :class:`ClaimEntry` holds the devices the kubelet was told, the claim's CDI spec (so a spec
that vanished is rewritten byte for byte) and what the API server said of the claim (for the
node monitor). The spec is kept as its text, not parsed: a node holds thousands of entries for
as long as the plugin runs, and a string is one object the cyclic garbage collector never
walks, where a parsed spec is about twenty that every full collection would.
:mod:`dra_driver.kubeletplugin.checkpoint` stores one entry per file.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, NamedTuple, TypeVar

from dra_driver.api import Backend, Isolation, Priority
from dra_driver.cdi.spec import canonical_json, canonical_object

_Member = TypeVar("_Member", bound=enum.StrEnum)


class ClaimState(enum.StrEnum):
    """How far preparing a claim got."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


def _member(kind: type[_Member], value: object, field: str) -> _Member:
    """Return the member of ``kind`` that ``value`` names; ValueError naming ``field`` if none."""
    for member in kind:
        if member.value == value:
            return member
    allowed = ", ".join(member.value for member in kind)
    raise ValueError(f"{field} is {value!r}, not one of {allowed}")


class ClaimRef(NamedTuple):
    """A claim as the kubelet names it: a key, compared and hashed as one."""

    namespace: str
    uid: str
    name: str


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    """One device of the answer to NodePrepareResources."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None


@dataclasses.dataclass(frozen=True)
class ShareCard:
    """A claim's total share of one card."""

    uuid: str
    cores: int
    memory_bytes: int


@dataclasses.dataclass(frozen=True)
class ShareInfo:
    """What the node monitor and the usage metrics know of a claim, from the API server.

    Never from the claim's containers: they write their own regions and environment, and
    could claim a higher priority or another card there.
    """

    backend: Backend
    isolation: Isolation
    priority: Priority
    pods: tuple[str, ...]
    """The pods the claim was reserved for when it was prepared."""
    cards: tuple[ShareCard, ...]

    def to_json(self) -> dict[str, Any]:
        """Serialise for the checkpoint file."""
        return {
            "backend": str(self.backend),
            "isolation": str(self.isolation),
            "priority": str(self.priority),
            "pods": list(self.pods),
            "cards": [dataclasses.asdict(card) for card in self.cards],
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ShareInfo:
        """Read back what :meth:`to_json` wrote; ValueError naming a field of no known value."""
        return cls(
            backend=_member(Backend, document["backend"], "share.backend"),
            isolation=_member(Isolation, document["isolation"], "share.isolation"),
            priority=_member(Priority, document["priority"], "share.priority"),
            pods=tuple(str(pod) for pod in document.get("pods") or ()),
            cards=tuple(
                ShareCard(str(c["uuid"]), int(c["cores"]), int(c["memory_bytes"]))
                for c in document.get("cards") or ()
            ),
        )


@dataclasses.dataclass(frozen=True)
class ClaimEntry:
    """The checkpointed state of one claim."""

    uid: str
    namespace: str
    name: str
    state: ClaimState
    spec_file: str
    devices: tuple[PreparedDevice, ...] = ()
    spec: str | None = None
    """The CDI spec's file content without its newline (:func:`~dra_driver.cdi.canonical_json`)."""
    share: ShareInfo | None = None
    """Absent in entries written before it existed (read back as ``None``)."""

    def to_json(self) -> dict[str, Any]:
        """Return the entry as the JSON object the checkpoint file holds (the spec parsed)."""
        spec = json.loads(self.spec) if self.spec is not None else None
        return {**self._members(), "spec": spec}

    def canonical(self) -> str:
        """Return :meth:`to_json` as canonical JSON, without parsing the spec."""
        members = {key: canonical_json(value) for key, value in self._members().items()}
        members["spec"] = self.spec if self.spec is not None else "null"
        return canonical_object(members)

    def _members(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": str(self.state),
            "spec_file": self.spec_file,
            "devices": [dataclasses.asdict(device) for device in self.devices],
            **({"share": self.share.to_json()} if self.share is not None else {}),
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ClaimEntry:
        """Read back what :meth:`to_json` wrote."""
        devices = tuple(
            PreparedDevice(
                request_names=tuple(d["request_names"]),
                pool_name=d["pool_name"],
                device_name=d["device_name"],
                cdi_device_ids=tuple(d["cdi_device_ids"]),
                share_id=d.get("share_id"),
            )
            for d in document.get("devices") or []
        )
        return cls(
            uid=document["uid"],
            namespace=document["namespace"],
            name=document["name"],
            state=_member(ClaimState, document["state"], "state"),
            spec_file=document["spec_file"],
            devices=devices,
            spec=canonical_json(spec) if (spec := document.get("spec")) is not None else None,
            share=ShareInfo.from_json(document["share"]) if document.get("share") else None,
        )
