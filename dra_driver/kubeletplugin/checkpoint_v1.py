"""Reading the checkpoint of release 0.1.0 (format 1), so that an upgrade can migrate it.

Format 1 is one file, ``checkpoint.json``: ``{"checksum", "claims": {uid: entry}, "version":
1}``, the checksum being the SHA-256 of the claims map as canonical JSON (keys sorted, no
spaces). Nothing writes it any more.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from dra_driver.kubeletplugin.entries import ClaimEntry

LEGACY_FILE: Final = "checkpoint.json"
LEGACY_VERSION: Final = 1


class LegacyVersionError(ValueError):
    """``checkpoint.json`` says a version other than 1: not ours to read, nor to discard."""

    def __init__(self, version: object) -> None:
        super().__init__(f"checkpoint.json has format version {version!r}, not 1")
        self.version = version


def canonical(value: Any) -> str:  # noqa: ANN401 - any JSON value
    """Return ``value`` as canonical JSON: keys sorted, no spaces, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


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
    digest = hashlib.sha256(canonical(claims).encode()).hexdigest()
    if document.get("checksum") != digest:
        raise ValueError("checksum mismatch")
    return {uid: ClaimEntry.from_json(entry) for uid, entry in claims.items()}
