"""What every benchmark under hack/bench shares: percentiles, the machine, the final JSON line.

Each benchmark prints a human-readable table as it goes and, last, one JSON object on one line,
so a script (or the smoke tests in tests/bench) can read the figures without parsing the table.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dra_driver.nvml.inventory import Inventory, parse_inventory

YARDSTICK_ADDITIONS = 10_000_000
"""The yardstick: seconds a plain Python loop takes for this many additions."""
_YARDSTICK_SLICE = 1_000_000


def percentile(samples: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0-100) by the nearest-rank method; 0 for no samples."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """Return count, p50, p99 and max in milliseconds, rounded to microseconds."""
    return {
        "count": len(seconds),
        "p50_ms": round(percentile(seconds, 50) * 1000, 3),
        "p99_ms": round(percentile(seconds, 99) * 1000, 3),
        "max_ms": round(max(seconds, default=0.0) * 1000, 3),
    }


def yardstick_s(runs: int = 3) -> float:
    """Return the seconds this machine takes for ten million additions in a plain Python loop.

    Figures from two machines of the same kind have differed fourfold; printed beside them,
    this tells a slower machine from slower code. Timed on a tenth of the loop, best of
    ``runs`` (a scheduler hiccup only ever makes a run slower), and scaled up.
    """
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        total = 0
        for i in range(_YARDSTICK_SLICE):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(best * YARDSTICK_ADDITIONS / _YARDSTICK_SLICE, 3)


def per_yardstick(rate: float, yardstick: float) -> float:
    """Return ``rate`` (per second) as per yardstick second: what the machine's speed cancels."""
    return round(rate * yardstick, 1)


def machine() -> dict[str, Any]:
    """Return what the figures depend on: CPU count, Python, platform, the CPU yardstick."""
    return {
        "yardstick_s": yardstick_s(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


def peak_rss_bytes() -> int:
    """Return this process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def h100_nodes(nodes: int, prefix: str) -> Inventory:
    """Return ``nodes`` nodes (``<prefix>0``, ...) of 8 H100 80GB cards, two NUMA nodes each."""
    return parse_inventory(f"""
generate:
  nodes: {nodes}
  namePrefix: {prefix}
  cardsPerNode: 8
  card: {{productName: NVIDIA H100 80GB HBM3, memory: 80Gi, architecture: Hopper,
         cudaComputeCapability: "9.0", driverVersion: "550.54.15", numaNodes: 2}}
""")


def proc_status_bytes(pid: int, field: str) -> int:
    """Return a size field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def emit(result: dict[str, Any]) -> None:
    """Print the benchmark's figures as the final line of output: one JSON object."""
    sys.stdout.flush()
    speed = (result.get("machine") or {}).get("yardstick_s")
    if speed is not None:
        print(f"yardstick: {speed:.3f} s for {YARDSTICK_ADDITIONS:,} additions in a Python loop")
    print(json.dumps(result, sort_keys=True), flush=True)
