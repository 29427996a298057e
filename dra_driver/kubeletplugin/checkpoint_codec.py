"""The content of a checkpoint file (format 2): the claims one prepare call recorded.

A file is ``{"checksum", "claims": [entry, ...], "version": 2}``, the checksum being the
SHA-256 of the list of claims as canonical JSON, and is named after its first claim's UID.
Earlier development builds wrote format 2 as one claim per file, ``{"checksum", "claim",
"version": 2}`` (the checksum that of the claim): such a file is read as a list of one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Final

from dra_driver.cdi.spec import canonical_json
from dra_driver.kubeletplugin.checkpoint_v1 import legacy_share
from dra_driver.kubeletplugin.entries import ClaimEntry
from dra_driver.logging import get_logger

log = get_logger(__name__)

FORMAT_VERSION: Final = 2


class CheckpointError(RuntimeError):
    """The checkpoint cannot be used as it is; what to do is in the message."""


class UnknownCheckpointVersionError(CheckpointError):
    """The node holds checkpoint data of a format this plugin does not know; nothing touched."""


def encode(entries: Sequence[ClaimEntry]) -> bytes:
    """Return the content of the file holding ``entries`` (at least one), in their order."""
    if not entries:
        raise ValueError("a checkpoint file holds at least one claim")
    claims = "[" + ",".join(entry.canonical() for entry in entries) + "]"
    checksum = hashlib.sha256(claims.encode()).hexdigest()
    return f'{{"checksum":"{checksum}","claims":{claims},"version":{FORMAT_VERSION}}}\n'.encode()


def decode(name: str, data: bytes) -> tuple[ClaimEntry, ...]:
    """Return the entries of the file named after claim ``name``.

    ValueError/KeyError/TypeError when the file is damaged; UnknownCheckpointVersionError when
    another release wrote it in a format this one does not read.
    """
    document = json.loads(data)
    if not isinstance(document, dict):
        raise TypeError("the document is not a JSON object")
    version = document.get("version")
    if version != FORMAT_VERSION:
        if isinstance(version, int) and not isinstance(version, bool) and version > 0:
            raise UnknownCheckpointVersionError(
                f"checkpoint entry of claim {name} has format version {version}; this plugin "
                f"reads format {FORMAT_VERSION}. It was written by another release of the "
                "plugin: run that release (or a later one) on this node"
            )
        raise ValueError(f"no valid format version ({version!r})")
    if "claims" in document:
        signed = document["claims"]
        members = signed if isinstance(signed, list) else []
    else:
        signed = document.get("claim")
        members = [signed]
    if not members or not all(isinstance(member, dict) for member in members):
        raise TypeError("the claims are not a list of JSON objects")
    if document.get("checksum") != hashlib.sha256(canonical_json(signed).encode()).hexdigest():
        raise ValueError("checksum mismatch")
    entries = tuple(ClaimEntry.from_json(member) for member in members)
    if entries[0].uid != name:
        raise ValueError(f"the file of claim {name} holds claim {entries[0].uid} first")
    if len({entry.uid for entry in entries}) != len(entries):
        raise ValueError("a claim is recorded twice")
    return entries


def with_legacy_share(entry: ClaimEntry) -> ClaimEntry:
    """Return ``entry`` with the share derived from its spec if it has none (logged if none can be).

    Entries written before entries recorded the share (format 1, early format 2) get it once.
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
