"""Reading what release 0.1.0 checkpointed (format 1), so that an upgrade can migrate it.

Format 1 is one file, ``checkpoint.json``: ``{"checksum", "claims": {uid: entry}, "version":
1}``, the checksum being the SHA-256 of the claims map as canonical JSON (keys sorted, no
spaces). Nothing writes it any more. Its entries, like the format-2 entries written before
entries recorded a claim's share, have no ``share``: :func:`legacy_share` derives it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from dra_driver.cdi.spec import canonical_json
from dra_driver.kubeletplugin.entries import ClaimEntry, ShareInfo

LEGACY_FILE: Final = "checkpoint.json"
LEGACY_VERSION: Final = 1


class LegacyVersionError(ValueError):
    """``checkpoint.json`` says a version other than 1: not ours to read, nor to discard."""

    def __init__(self, version: object) -> None:
        super().__init__(f"checkpoint.json has format version {version!r}, not 1")
        self.version = version


def decode_legacy(data: bytes) -> dict[str, ClaimEntry]:
    """Return the entries of a format-1 document.

    Raises :class:`LegacyVersionError` for another version, ValueError, KeyError or
    TypeError when the document is damaged.
    """
    document = json.loads(data)
    if not isinstance(document, dict) or not isinstance(document.get("claims"), dict):
        raise TypeError("the document or its claims is not a JSON object")
    if document.get("version") != LEGACY_VERSION:
        raise LegacyVersionError(document.get("version"))
    claims = document["claims"]
    if not all(isinstance(entry, dict) for entry in claims.values()):
        raise TypeError("a claim entry is not a JSON object")
    digest = hashlib.sha256(canonical_json(claims).encode()).hexdigest()
    if document.get("checksum") != digest:
        raise ValueError("checksum mismatch")
    return {uid: ClaimEntry.from_json(entry) for uid, entry in claims.items()}


def legacy_share(spec_text: str | None) -> ShareInfo:
    """Return the share of a claim prepared before entries recorded it, from its CDI spec.

    Those releases gave every container of the claim its backend, policy and per-card limits
    in ``GPUSHARE_*`` variables, numbered over all the claim's cards. The spec is the one the
    plugin wrote and checksummed into its entry: no container could change it. Raises
    KeyError or ValueError when a variable is missing or holds no known value, TypeError or
    AttributeError when the spec is not shaped as those releases wrote it.
    """
    spec: dict[str, Any] = json.loads(spec_text) if spec_text is not None else {}
    edits = [spec.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in spec.get("devices") or []]
    env = dict(str(entry).partition("=")[::2] for edit in edits for entry in edit.get("env") or [])
    uuids = [uuid for uuid in env["GPUSHARE_DEVICE_UUIDS"].split(",") if uuid]
    return ShareInfo.from_json(
        {
            "backend": env["GPUSHARE_BACKEND"],
            "isolation": env["GPUSHARE_ISOLATION"],
            "priority": env["GPUSHARE_PRIORITY"],
            "cards": [
                {
                    "uuid": uuid,
                    "cores": env[f"GPUSHARE_CORES_{i}"],
                    "memory_bytes": env[f"GPUSHARE_MEMORY_BYTES_{i}"],
                }
                for i, uuid in enumerate(uuids)
            ],
        }
    )
