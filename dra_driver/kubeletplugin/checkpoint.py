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
import errno
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from dra_driver.cdi.spec import atomic_write_bytes
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

    backend: str
    isolation: str
    priority: str
    pods: tuple[str, ...]
    """The pods the claim was reserved for when it was prepared."""
    cards: tuple[ShareCard, ...]

    def to_json(self) -> dict[str, Any]:
        """Serialise for the checkpoint file."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ShareInfo:
        """Read back what :meth:`to_json` wrote."""
        return cls(
            backend=str(document["backend"]),
            isolation=str(document["isolation"]),
            priority=str(document["priority"]),
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
    spec: dict[str, Any] | None = None
    share: ShareInfo | None = None
    """Absent in entries written before it existed (read back as ``None``)."""

    def to_json(self) -> dict[str, Any]:
        """Serialise for the checkpoint file (shares ``spec``: dump it, do not change it)."""
        # Not dataclasses.asdict: it deep-copies the spec, the bulk of every entry.
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": str(self.state),
            "spec_file": self.spec_file,
            "devices": [dataclasses.asdict(device) for device in self.devices],
            "spec": self.spec,
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
            state=ClaimState(document["state"]),
            spec_file=document["spec_file"],
            devices=devices,
            spec=document.get("spec"),
            share=ShareInfo.from_json(document["share"]) if document.get("share") else None,
        )


class CorruptCheckpointError(RuntimeError):
    """The checkpoint could not be read; it was moved aside to the path in the message."""


def _canonical(value: Any) -> str:  # noqa: ANN401 - any JSON value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _member(uid: str, entry: Any) -> bytes:  # noqa: ANN401 - an entry's JSON object
    """Return ``"<uid>":<entry>`` as the claims map's canonical JSON holds it."""
    return f"{_canonical(uid)}:{_canonical(entry)}".encode()


def _claims_json(members: dict[str, bytes]) -> bytes:
    """Return the canonical JSON of the claims map, joined from its members.

    Identical to ``_canonical(claims).encode()`` (keys sorted): a save serialises only the
    entries that changed, and its cost on a node with many claims is a join, a hash and a write.
    """
    return b"{" + b",".join(members[uid] for uid in sorted(members)) + b"}"


def _checksum(claims_json: bytes) -> str:
    return hashlib.sha256(claims_json).hexdigest()


def _decode(data: bytes) -> tuple[dict[str, ClaimEntry], dict[str, bytes]]:
    """Return the entries and each one's member bytes (what the next save reuses)."""
    document = json.loads(data)
    if not isinstance(document, dict) or not isinstance(document.get("claims"), dict):
        raise TypeError("the document or its claims is not a JSON object")
    claims = document["claims"]
    if not all(isinstance(entry, dict) for entry in claims.values()):
        raise TypeError("a claim entry is not a JSON object")
    if document.get("version") != _FORMAT_VERSION:
        raise ValueError(f"unknown checkpoint version {document.get('version')!r}")
    members = {uid: _member(uid, entry) for uid, entry in claims.items()}
    if document.get("checksum") != _checksum(_claims_json(members)):
        raise ValueError("checksum mismatch")
    return {uid: ClaimEntry.from_json(entry) for uid, entry in claims.items()}, members


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    """Return what changes whenever the file is replaced or rewritten (``None``: absent)."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def _read_regular(path: Path) -> bytes:
    """Read ``path`` if it is a regular file; a symlink, FIFO or device is a corrupt checkpoint.

    The plugin runs as root: following a link planted here would read (and later move) a file
    of someone else's choosing, and opening a FIFO would hang start-up.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("it is a symlink, not a regular file") from exc
        raise
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ValueError("it is not a regular file")
        return file.read()


class Checkpoint:
    """The checkpoint file of one plugin directory; not thread-safe (callers serialise).

    Each entry's JSON is kept from the last load or save, so a save serialises only the
    entries that changed, and a load is skipped while the file is the one last read or
    written here (another plugin process replaces it by rename, which changes its inode).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, ClaimEntry] = {}
        self._members: dict[str, bytes] = {}
        self._identity: tuple[int, int, int, int] | None = None

    def load(self) -> None:
        """Read the file; a missing file is an empty checkpoint, a corrupt one is moved aside."""
        identity = _identity(self.path)
        if identity is not None and identity == self._identity:
            return
        if identity is None:
            self.claims, self._members, self._identity = {}, {}, None
            return
        try:
            self.claims, self._members = _decode(_read_regular(self.path))
            self._identity = identity
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
            self.claims, self._members, self._identity = {}, {}, None
            raise CorruptCheckpointError(
                f"checkpoint {self.path} is corrupt ({exc}); moved aside to {aside}"
            ) from exc

    def put(self, *entries: ClaimEntry) -> None:
        """Record ``entries`` in one write; memory changes only once the file is written.

        A failed write must not be reported as done when the kubelet retries.
        """
        self.update(put=entries)

    def remove(self, *uids: str) -> None:
        """Forget claims in one write, file first; unknown claims are ignored."""
        self.update(remove=uids)

    def update(self, *, put: Sequence[ClaimEntry] = (), remove: Sequence[str] = ()) -> None:
        """Record ``put`` and forget ``remove`` in one write (nothing to change: no write)."""
        forget = {uid for uid in remove if uid in self.claims}
        if not put and not forget:
            return
        entries = {uid: e for uid, e in self.claims.items() if uid not in forget}
        members = {uid: m for uid, m in self._members.items() if uid not in forget}
        for entry in put:
            entries[entry.uid] = entry
            members[entry.uid] = _member(entry.uid, entry.to_json())
        claims_json = _claims_json(members)
        document = b"".join(
            (
                b'{"checksum":"',
                _checksum(claims_json).encode(),
                b'","claims":',
                claims_json,
                b',"version":%d}\n' % _FORMAT_VERSION,
            )
        )
        atomic_write_bytes(self.path, document, mode=0o600)
        self.claims, self._members = entries, members
        self._identity = _identity(self.path)
