"""The golden region: written by HAMi-core's own struct layout, with the values in expected.json."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "hami-core"


def golden_region() -> bytes:
    """Return the golden region's bytes (2,008,952: format 1.2)."""
    return gzip.decompress((DATA / "region.bin.gz").read_bytes())


def golden_values() -> dict[str, Any]:
    """Return what the golden region holds, field by field."""
    values: dict[str, Any] = json.loads((DATA / "expected.json").read_text())
    return values


def golden_file(path: Path) -> Path:
    """Write the golden region to ``path``; return it."""
    path.write_bytes(golden_region())
    return path
