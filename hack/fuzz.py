#!/usr/bin/env python3
"""Run the fuzz targets (tests/fuzz) for longer than the test suite does.

The targets are Hypothesis properties of the GpuShareConfig decoder and of the CDI spec and
env builder; the suite runs 300 examples each, this runs as many as asked.

    python hack/fuzz.py                  # 20,000 examples per target (a few minutes)
    python hack/fuzz.py --examples 200000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from gpushare_simulator.harness.spawn import spawn

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    """Run pytest on tests/fuzz with the example count in the environment."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=20_000, help="examples per target")
    args = parser.parse_args()
    started = time.monotonic()
    # Started to die with this script: a fuzz run killed midway leaves no pytest behind.
    status = spawn(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", str(ROOT / "tests/fuzz")],
        env={**os.environ, "GPUSHARE_FUZZ_EXAMPLES": str(args.examples)},
        cwd=ROOT,
    ).wait()
    line = {
        "run": "fuzz",
        "examples_per_target": args.examples,
        "seconds": round(time.monotonic() - started, 1),
        "passed": status == 0,
    }
    print(json.dumps(line, sort_keys=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
