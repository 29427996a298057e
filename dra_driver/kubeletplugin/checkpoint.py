"""The kubelet plugin's checkpoint: one file per prepare call (format 2).

``<plugin dir>/checkpoint/<claim uid>.json`` holds the claims a prepare call recorded and is
named after the first of them (:mod:`~dra_driver.kubeletplugin.checkpoint_codec`). A file is
written (fsynced, renamed into place) after its claims' CDI specs and before the kubelet is
answered; an unprepare takes its claims out: a file goes with its last claim, and is rewritten
without the others (under the name of its new first claim). The kubelet calls once per pod
with all of the pod's claims, so a call costs one file and two fsyncs, however many claims it
names and whatever else the node holds.

Nothing here ever deletes what it cannot read as format 2:

- a file of a newer format (a rollback after an upgrade), or a ``checkpoint.json`` of a
  version other than 1, raises :class:`UnknownCheckpointVersionError`: the plugin refuses to
  start, and every claim on the node keeps its files;
- a damaged file is renamed to ``<uid>.json.corrupt-<time>`` and its claims are forgotten;
  its name stays in :attr:`Checkpoint.damaged`, so start-up removes no unrecorded spec or
  directory (the damaged file may have recorded them): their running containers keep them, and
  the kubelet's next prepare of such a claim starts over;
- a format-1 ``checkpoint.json`` (release 0.1.0) is migrated (its completed claims added to
  those already here, as one file) and kept as ``checkpoint.json.migrated``.

An entry without the claim's share (backend, policy, per-card limits: what the node monitor
acts on) was written before entries recorded it. It gets the share once, derived from its own
CDI spec, and its file is written back with it, so nothing reads a share anywhere else
afterwards.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Final

from dra_driver.cdi.names import check_claim_uid
from dra_driver.cdi.spec import StagedFile, ensure_directory, read_regular, sync_directory_of
from dra_driver.kubeletplugin.checkpoint_codec import (
    CheckpointError,
    UnknownCheckpointVersionError,
    decode,
    encode,
    with_legacy_share,
)
from dra_driver.kubeletplugin.checkpoint_v1 import LEGACY_FILE, LegacyVersionError, decode_legacy
from dra_driver.kubeletplugin.entries import ClaimEntry, ClaimState
from dra_driver.logging import get_logger

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CorruptCheckpointError",
    "UnknownCheckpointVersionError",
]

log = get_logger(__name__)

DIRECTORY: Final = "checkpoint"
# A claim UID is a DNS label (checked before it becomes a file name).
_FILE: Final = re.compile(
    r"(?P<uid>[a-z0-9][-a-z0-9]{0,62})\.json(?P<corrupt>\.corrupt-[0-9TZ.]+)?"
)


class CorruptCheckpointError(CheckpointError):
    """A format-1 ``checkpoint.json`` was damaged; it was moved aside (path in the message)."""


@dataclasses.dataclass(frozen=True)
class _File:
    """A checkpoint file as last read or written: its inode tells whether it changed since."""

    inode: int
    entries: tuple[ClaimEntry, ...]


def _stamp() -> str:
    # Microseconds: two corrupt loads in one second must not overwrite the evidence.
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


class Checkpoint:
    """The checkpoint directory of one plugin directory; not thread-safe (callers serialise).

    A load reads only the files that appeared or were replaced since the last load or write
    (a file is only ever replaced whole, by rename, so a new inode under a known name means a
    new content), also when another plugin process (a rolling update, under the node lock)
    wrote them.
    """

    def __init__(self, plugin_dir: Path) -> None:
        self.directory = plugin_dir / DIRECTORY
        self.legacy = plugin_dir / LEGACY_FILE
        self._files: dict[str, _File] = {}
        self.claims: dict[str, ClaimEntry] = {}
        """Every recorded claim by UID (rebuilt from the files after every change)."""
        self.damaged: set[str] = set()
        """Names of the files that could not be read (moved aside): what they held is unknown."""

    def path(self, name: str) -> Path:
        """Return the file named after claim ``name`` (UnsafeNameError if not a DNS label)."""
        return self.directory / f"{check_claim_uid(name)}.json"

    def load(self) -> None:
        """Catch up with the directory, then migrate a format-1 file if there is one.

        The files first: a migration adds to the files already there, never over them.
        """
        ensure_directory(self.directory, 0o700)
        self._scan()
        if self.legacy.exists() or self.legacy.is_symlink():
            self._migrate()
        self._index()

    def _scan(self) -> None:
        present: dict[str, int] = {}
        with os.scandir(self.directory) as listing:
            for item in listing:
                match = _FILE.fullmatch(item.name)
                if match is None:
                    continue  # temporary files, the operator's own notes
                if match["corrupt"]:
                    self.damaged.add(match["uid"])
                else:
                    present[match["uid"]] = item.inode()
        self._files = {
            name: file for name, file in self._files.items() if present.get(name) == file.inode
        }
        for name in sorted(present.keys() - self._files.keys()):
            self._read(name, present[name])

    def _read(self, name: str, inode: int) -> None:
        path = self.path(name)
        try:
            entries = decode(name, read_regular(path))
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError) as exc:  # an unknown version is not caught
            aside = path.with_name(f"{path.name}.corrupt-{_stamp()}")
            path.rename(aside)
            self.damaged.add(name)
            log.error(  # noqa: TRY400 - the cause is in the message; a traceback adds nothing
                "checkpoint.corrupt_entry",
                claim_uid=name,
                moved_to=str(aside),
                error=str(exc),
                hint="the claims it recorded are forgotten and their files left as they are "
                "(start-up removes no unrecorded file while it is there); the kubelet's next "
                "prepare of such a claim starts over. Delete it once those pods are gone",
            )
            return
        self._files[name] = _File(inode, entries)
        if any(entry.share is None for entry in entries):
            self._save_shares(name, tuple(with_legacy_share(entry) for entry in entries))

    def _save_shares(self, name: str, entries: tuple[ClaimEntry, ...]) -> None:
        """Write back a file whose entries were just given their share: derived only once."""
        if entries == self._files[name].entries:
            return  # no share could be derived; logged
        try:
            self._store(name, entries)
            sync_directory_of(self.path(name))
        except OSError as exc:
            self._files[name] = dataclasses.replace(self._files[name], entries=entries)
            log.warning(
                "checkpoint.share_not_saved",
                claim_uid=name,
                error=str(exc),
                hint="it is derived again from the claim's spec at the next start",
            )

    def _migrate(self) -> None:
        """Add the completed claims of a format-1 ``checkpoint.json`` as one file."""
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
        self.put(*completed)
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
        """Record ``entries`` in one file (fsynced, renamed into place), then sync the directory.

        All or nothing: on a failure nothing of the batch is recorded, in memory or on disk. A
        claim already recorded elsewhere is taken out of its older file after the new one is
        in place (a crash between leaves it in both, which reads back the same).
        """
        for entry in entries:
            if entry.state is not ClaimState.PREPARE_COMPLETED:
                raise ValueError(f"claim {entry.uid}: only completed prepares are recorded")
        batch = tuple({entry.uid: entry for entry in entries}.values())
        if not batch:
            return
        ensure_directory(self.directory, 0o700)
        name = batch[0].uid
        try:
            self._store(name, self._merged(name, batch))
            self._take_out({entry.uid for entry in batch}, keep=name)
        finally:
            self._index()
        sync_directory_of(self.path(name))

    def remove(self, *uids: str) -> None:
        """Forget claims (their files rewritten or removed, then the directory synced)."""
        try:
            changed = self._take_out(set(uids))
        finally:
            self._index()
        if changed:
            sync_directory_of(self.directory / "x")

    def _merged(self, name: str, entries: tuple[ClaimEntry, ...]) -> tuple[ClaimEntry, ...]:
        """Return ``entries`` followed by the other claims the file ``name`` already holds."""
        kept = self._files.get(name)
        if kept is None:
            return entries
        uids = {entry.uid for entry in entries}
        return entries + tuple(entry for entry in kept.entries if entry.uid not in uids)

    def _store(self, name: str, entries: tuple[ClaimEntry, ...]) -> None:
        """Write ``entries`` as the file ``name`` (fsynced, renamed over it), memory after."""
        staged = StagedFile(self.path(name), encode(entries), 0o600)
        try:
            staged.commit()
        finally:
            staged.discard()
        self._files[name] = _File(staged.inode, entries)

    def _take_out(self, uids: Collection[str], keep: str | None = None) -> bool:
        """Take ``uids`` out of every file but ``keep``; return whether a file changed."""
        changed = False
        for name in list(self._files):
            file = self._files.get(name)  # as now: an earlier step may have merged into it
            if file is None or name == keep or not any(e.uid in uids for e in file.entries):
                continue
            changed = True
            rest = tuple(entry for entry in file.entries if entry.uid not in uids)
            if rest and rest[0].uid == name:
                self._store(name, rest)
                continue
            if rest:  # its first claim went: the rest go under the name of their new first
                self._store(rest[0].uid, self._merged(rest[0].uid, rest))
            self.path(name).unlink(missing_ok=True)
            del self._files[name]
        return changed

    def _index(self) -> None:
        self.claims = {e.uid: e for file in self._files.values() for e in file.entries}
