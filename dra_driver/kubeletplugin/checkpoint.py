"""The kubelet plugin's checkpoint: one file per prepared claim (format 2).

``<plugin dir>/checkpoint/<claim uid>.json`` holds ``{"checksum", "claim", "version": 2}``,
the checksum being the SHA-256 of the entry as canonical JSON. A file exists only for a claim
whose prepare completed: it is written (fsynced, renamed into place) after the claim's CDI
spec and before the kubelet is answered, and removed after the spec on unprepare. So a
prepare or unprepare costs the files of its own claims, whatever else the node holds.

Nothing here ever deletes what it cannot read as format 2:

- an entry of a newer format (a rollback after an upgrade), or a ``checkpoint.json`` of a
  version other than 1, raises :class:`UnknownCheckpointVersionError`: the plugin refuses to
  start, and every claim on the node keeps its files;
- a damaged entry is renamed to ``<uid>.json.corrupt-<time>`` and its claim is left alone
  (:attr:`Checkpoint.damaged`): its spec stays for its running container, and the kubelet's
  next prepare of it starts over;
- a format-1 ``checkpoint.json`` (release 0.1.0) is migrated to one file per claim (added to
  those already here) and kept as ``checkpoint.json.migrated``.

An entry without the claim's share (backend, policy, per-card limits: what the node monitor
acts on) was written before entries recorded it. It gets the share once, derived from its own
CDI spec (:func:`~dra_driver.kubeletplugin.checkpoint_v1.legacy_share`), and is written back
with it, so nothing reads a share anywhere else afterwards.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from dra_driver.cdi.names import check_claim_uid
from dra_driver.cdi.spec import (
    StagedFile,
    atomic_write_bytes,
    canonical_json,
    ensure_directory,
    read_regular,
    sync_directory_of,
)
from dra_driver.kubeletplugin.checkpoint_v1 import (
    LEGACY_FILE,
    LegacyVersionError,
    decode_legacy,
    legacy_share,
)
from dra_driver.kubeletplugin.entries import ClaimEntry, ClaimState
from dra_driver.logging import get_logger

log = get_logger(__name__)

FORMAT_VERSION: Final = 2
DIRECTORY: Final = "checkpoint"
# A claim UID is a DNS label (checked before it becomes a file name).
_ENTRY: Final = re.compile(
    r"(?P<uid>[a-z0-9][-a-z0-9]{0,62})\.json(?P<corrupt>\.corrupt-[0-9TZ.]+)?"
)


class CheckpointError(RuntimeError):
    """The checkpoint cannot be used as it is; what to do is in the message."""


class CorruptCheckpointError(CheckpointError):
    """A format-1 ``checkpoint.json`` was damaged; it was moved aside (path in the message)."""


class UnknownCheckpointVersionError(CheckpointError):
    """The node holds checkpoint data of a format this plugin does not know; nothing touched."""


def _stamp() -> str:
    # Microseconds: two corrupt loads in one second must not overwrite the evidence.
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def encode(entry: ClaimEntry) -> bytes:
    """Return the file content of ``entry``."""
    claim = entry.canonical()
    checksum = hashlib.sha256(claim.encode()).hexdigest()
    version = FORMAT_VERSION
    return f'{{"checksum":"{checksum}","claim":{claim},"version":{version}}}\n'.encode()


def decode(uid: str, data: bytes) -> ClaimEntry:
    """Return the entry of ``uid``'s file; ValueError/KeyError/TypeError when it is damaged."""
    document = json.loads(data)
    if not isinstance(document, dict):
        raise TypeError("the document is not a JSON object")
    version = document.get("version")
    if version != FORMAT_VERSION:
        if isinstance(version, int) and not isinstance(version, bool) and version > 0:
            raise UnknownCheckpointVersionError(
                f"checkpoint entry of claim {uid} has format version {version}; this plugin "
                f"reads format {FORMAT_VERSION}. It was written by another release of the "
                "plugin: run that release (or a later one) on this node"
            )
        raise ValueError(f"no valid format version ({version!r})")
    claim = document.get("claim")
    if not isinstance(claim, dict):
        raise TypeError("the claim is not a JSON object")
    if document.get("checksum") != hashlib.sha256(canonical_json(claim).encode()).hexdigest():
        raise ValueError("checksum mismatch")
    entry = ClaimEntry.from_json(claim)
    if entry.uid != uid:
        raise ValueError(f"the file of claim {uid} holds claim {entry.uid}")
    return entry


def with_legacy_share(entry: ClaimEntry) -> ClaimEntry:
    """Return ``entry`` with the share derived from its spec if it has none (logged if none can be).

    The migration of entries written before entries recorded the share; see the module.
    """
    if entry.share is not None:
        return entry
    try:
        share = legacy_share(entry.spec)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        log.warning(
            "checkpoint.share_unknown",
            claim_uid=entry.uid,
            error=str(exc),
            hint="the node monitor leaves the claim alone",
        )
        return entry
    log.info("checkpoint.share_migrated", claim_uid=entry.uid)
    return dataclasses.replace(entry, share=share)


class Checkpoint:
    """The checkpoint directory of one plugin directory; not thread-safe (callers serialise).

    A load reads only the files added since the last load or save: entries are never
    rewritten in place (a claim's file is created once and removed once; the one exception,
    an old entry given its share, changes nothing another process would not derive itself),
    so the names in the directory tell what changed, also when another plugin process (a
    rolling update, under the node lock) wrote them.
    """

    def __init__(self, plugin_dir: Path) -> None:
        self.directory = plugin_dir / DIRECTORY
        self.legacy = plugin_dir / LEGACY_FILE
        self.claims: dict[str, ClaimEntry] = {}
        self.damaged: set[str] = set()
        """Claims whose entry could not be read: neither theirs nor their files are touched."""

    def path(self, uid: str) -> Path:
        """Return the file of claim ``uid`` (UnsafeNameError if it is not a DNS label)."""
        return self.directory / f"{check_claim_uid(uid)}.json"

    def load(self) -> None:
        """Catch up with the directory; migrate a format-1 file first if there is one."""
        ensure_directory(self.directory, 0o700)
        if self.legacy.exists() or self.legacy.is_symlink():
            self._migrate()
        present: set[str] = set()
        with os.scandir(self.directory) as listing:
            for item in listing:
                match = _ENTRY.fullmatch(item.name)
                if match is None:
                    continue  # temporary files, the operator's own notes
                if match["corrupt"]:
                    self.damaged.add(match["uid"])
                else:
                    present.add(match["uid"])
        self.claims = {uid: e for uid, e in self.claims.items() if uid in present}
        for uid in sorted(present - self.claims.keys()):
            self._read(uid)

    def _read(self, uid: str) -> None:
        path = self.path(uid)
        try:
            entry = decode(uid, read_regular(path))
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError) as exc:  # an unknown version is not caught
            aside = path.with_name(f"{path.name}.corrupt-{_stamp()}")
            path.rename(aside)
            self.damaged.add(uid)
            log.error(  # noqa: TRY400 - the cause is in the message; a traceback adds nothing
                "checkpoint.corrupt_entry",
                claim_uid=uid,
                moved_to=str(aside),
                error=str(exc),
                hint="the claim's files are left as they are; the kubelet's next prepare of it "
                "starts over",
            )
            return
        if entry.share is None:
            entry = with_legacy_share(entry)
            if entry.share is not None:
                self._save_share(entry)
        self.claims[uid] = entry

    def _save_share(self, entry: ClaimEntry) -> None:
        """Write back an entry just given its share, so that it is never derived again."""
        try:
            atomic_write_bytes(self.path(entry.uid), encode(entry), mode=0o600)
        except OSError as exc:
            log.warning(
                "checkpoint.share_not_saved",
                claim_uid=entry.uid,
                error=str(exc),
                hint="it is derived again from the claim's spec at the next start",
            )

    def _migrate(self) -> None:
        """Turn a format-1 ``checkpoint.json`` into one file per completed claim."""
        try:
            legacy = decode_legacy(read_regular(self.legacy))
        except LegacyVersionError as exc:
            raise UnknownCheckpointVersionError(
                f"{self.legacy} has format version {exc.version!r}; this plugin migrates only "
                "format 1. It was written by another release of the plugin: run that release "
                "(or a later one) on this node"
            ) from exc
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.legacy.with_name(f"{self.legacy.name}.corrupt-{_stamp()}")
            self.legacy.rename(aside)
            log.error(  # noqa: TRY400 - the cause is in the message
                "checkpoint.corrupt",
                path=str(self.legacy),
                moved_to=str(aside),
                error=str(exc),
                hint="claims prepared before are forgotten; their pods may need a restart",
            )
            raise CorruptCheckpointError(
                f"checkpoint {self.legacy} is corrupt ({exc}); moved aside to {aside}"
            ) from exc
        completed = [
            with_legacy_share(e) for e in legacy.values() if e.state is ClaimState.PREPARE_COMPLETED
        ]
        # Entries already here stay: a checkpoint.json that appears after a migration was
        # written by a release-0.1.0 plugin still running beside this one (a rolling update
        # overlaps them), which started it afresh with only the claims it prepared since.
        self._write(completed)
        migrated = self.legacy.with_name(f"{self.legacy.name}.migrated")
        self.legacy.rename(migrated)
        sync_directory_of(migrated)
        log.info(
            "checkpoint.migrated",
            claims=len(completed),
            rolled_back=len(legacy) - len(completed),
            kept_as=str(migrated),
        )

    def put(self, *entries: ClaimEntry) -> None:
        """Record ``entries``: each file written and fsynced, then the directory once."""
        self.update(put=entries)

    def remove(self, *uids: str) -> None:
        """Forget claims (their files, then the directory fsynced); unknown ones are ignored."""
        self.update(remove=uids)

    def update(self, *, put: Sequence[ClaimEntry] = (), remove: Sequence[str] = ()) -> None:
        """Record ``put`` and forget ``remove``; memory follows each file as it is written."""
        forget = [uid for uid in remove if uid in self.claims]
        if not put and not forget:
            return
        ensure_directory(self.directory, 0o700)
        self._write(put)
        self._unlink(forget)

    def _write(self, entries: Sequence[ClaimEntry]) -> None:
        """Write every entry's file, then fsync them, then rename each into place.

        Staged together, a batch's files reach the disk at once instead of one fsync at a
        time; each still becomes visible only complete and synced. On a failure, the entries
        renamed before it are recorded (in memory as on disk) and the rest left out.
        """
        for entry in entries:
            if entry.state is not ClaimState.PREPARE_COMPLETED:
                raise ValueError(f"claim {entry.uid}: only completed prepares are recorded")
        staged: list[tuple[ClaimEntry, StagedFile]] = []
        written = False
        try:
            for entry in entries:
                staged.append((entry, StagedFile(self.path(entry.uid), encode(entry), 0o600)))
            for _, file in staged:
                file.start_writeback()
            for entry, file in staged:
                file.commit()
                self.claims[entry.uid] = entry
                written = True
        finally:
            for _, file in staged:
                file.discard()
            if written:
                sync_directory_of(self.directory / "x")

    def _unlink(self, uids: Iterable[str]) -> None:
        removed = False
        try:
            for uid in uids:
                self.path(uid).unlink(missing_ok=True)
                self.claims.pop(uid, None)
                removed = True
        finally:
            if removed:
                sync_directory_of(self.directory / "x")
