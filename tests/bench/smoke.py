"""Run a hack/bench script at its smoke size and return its final JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def smoke_run(script: str, *args: str, timeout: float = 100) -> dict[str, Any]:
    """Run ``hack/bench/<script> --smoke [args]``; fail on a non-zero exit; return the last line."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "bench" / script), "--smoke", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
