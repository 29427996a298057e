"""The kubelet plugin's checkpoint: which claims are prepared, and how far.

A claim is recorded as ``PrepareStarted`` before its CDI spec is written and as
``PrepareCompleted`` (with the answer given to the kubelet and the spec itself) after. After a
crash at any instruction, start-up reconciliation can therefore tell a half-done claim (roll it
back; the kubelet retries) from a finished one (rewrite its spec if it vanished). The file is
replaced atomically and carries a checksum; a corrupt file is moved aside, never reset silently.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import json
from pathlib import Path
from typing import Any, Final

from dra_driver.cdi.spec import atomic_write_json
from dra_driver.logging import get_logger

log = get_logger(__name__)

_FORMAT_VERSION: Final = 1


class ClaimState(enum.StrEnum):
    """How far preparing a claim got."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    """One device of the answer to NodePrepareResources."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None


@dataclasses.dataclass(frozen=True)
class ClaimEntry:
    """The checkpointed state of one claim."""

    uid: str
    namespace: str
    name: str
    state: ClaimState
    spec_file: str
    devices: tuple[PreparedDevice, ...] = ()
    spec: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Serialise for the checkpoint file."""
        document = dataclasses.asdict(self)
        document["state"] = str(self.state)
        return document

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
            state=ClaimState(document["state"]),
            spec_file=document["spec_file"],
            devices=devices,
            spec=document.get("spec"),
        )


class CorruptCheckpointError(RuntimeError):
    """The checkpoint could not be read; it was moved aside to the path in the message."""


def _checksum(claims: dict[str, Any]) -> str:
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


def _decode(data: bytes) -> dict[str, ClaimEntry]:
    document = json.loads(data)
    if not isinstance(document, dict) or not isinstance(document.get("claims"), dict):
        raise TypeError("the document or its claims is not a JSON object")
    claims = document["claims"]
    if not all(isinstance(entry, dict) for entry in claims.values()):
        raise TypeError("a claim entry is not a JSON object")
    if document.get("version") != _FORMAT_VERSION:
        raise ValueError(f"unknown checkpoint version {document.get('version')!r}")
    if document.get("checksum") != _checksum(claims):
        raise ValueError("checksum mismatch")
    return {uid: ClaimEntry.from_json(entry) for uid, entry in claims.items()}


class Checkpoint:
    """The checkpoint file of one plugin directory; not thread-safe (callers serialise)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, ClaimEntry] = {}

    def load(self) -> None:
        """Read the file; a missing file is an empty checkpoint, a corrupt one is moved aside."""
        if not self.path.exists():
            self.claims = {}
            return
        try:
            self.claims = _decode(self.path.read_bytes())
        except (ValueError, KeyError, TypeError) as exc:
            # Microseconds: two corrupt loads in one second must not overwrite the evidence.
            stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
            self.path.rename(aside)
            log.error(  # noqa: TRY400 - the cause is in the message; a traceback adds nothing
                "checkpoint.corrupt",
                path=str(self.path),
                moved_to=str(aside),
                error=str(exc),
                hint="claims prepared before are forgotten; their pods may need a restart",
            )
            self.claims = {}
            raise CorruptCheckpointError(
                f"checkpoint {self.path} is corrupt ({exc}); moved aside to {aside}"
            ) from exc

    def put(self, entry: ClaimEntry) -> None:
        """Record ``entry``; memory changes only once the file is written.

        A failed write must not be reported as done when the kubelet retries.
        """
        self._save({**self.claims, entry.uid: entry})

    def remove(self, uid: str) -> None:
        """Forget a claim, file first; forgetting an unknown claim is a no-op."""
        if uid in self.claims:
            self._save({k: v for k, v in self.claims.items() if k != uid})

    def _save(self, entries: dict[str, ClaimEntry]) -> None:
        claims = {uid: entry.to_json() for uid, entry in sorted(entries.items())}
        document = {"version": _FORMAT_VERSION, "checksum": _checksum(claims), "claims": claims}
        atomic_write_json(self.path, document, mode=0o600)
        self.claims = entries
