#!/usr/bin/env python3
"""Benchmark the kubelet plugin's node monitor: its cost with 100 regions, and how fast it acts.

Cost: 100 prepared claims (10 cards, each with one online and nine offline claims), one
HAMi-core region each with 4 processes, as ``libvgpu.so`` lays them out. The monitor runs alone
in a child process (so nothing else counts against it) for 60 s at its default period of 1 s,
while this process keeps the online work of half the cards busy, so every period suspends,
resumes and writes. Measured in the child: CPU time over wall time (percent of one core),
resident memory before the first period and after the last (what 100 open regions cost), and
each period's duration.

Delays: one online and one offline claim on one card, each with a simulated CUDA process (the
simulator's, which launches kernels as the library's rate limiter lets it and samples SM use
every 120 ms), the monitor running on its own thread. Online work starts at a random moment of
the monitor's period: the time until the offline region is suspended; it stops one to three
periods later: the time until the region is resumed, and until the offline process's next
kernel runs (the library looks again at a held launch once a second). 15 rounds with online
work under ``burst-share`` (alone on its priority it bursts, so only its SM use shows it busy)
and 15 under ``fixed-share`` (always rate-limited: it marks every launch, and its last mark
takes one more period to run out).

    python hack/bench/monitor.py            # the full run (about two and a half minutes)
    python hack/bench/monitor.py --smoke    # tiny, for the test suite

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from benchlib import emit, latency_summary, machine
from gpushare_simulator.harness.regions import FakeProcess, FakeTask
from gpushare_simulator.simulate.cudawork import CudaProcess

from dra_driver.api import Backend, Isolation, Priority
from dra_driver.kubeletplugin.entries import ClaimRef, ShareCard, ShareInfo
from dra_driver.kubeletplugin.monitor import MonitoredClaim, RegionMonitor

GIB: Final = 1024**3
CPU_TARGET_PERCENT: Final = 2.0
RSS_TARGET_BYTES: Final = 10 * 1024 * 1024


def _claim(uid: str, priority: str, uuid: str) -> MonitoredClaim:
    info = ShareInfo(
        Backend.HAMI_CORE,
        Isolation.BURST_SHARE,
        Priority(priority),
        (f"pod-{uid}",),
        (ShareCard(uuid, 10, GIB),),
    )
    return MonitoredClaim(ClaimRef("bench", uid, f"claim-{uid}"), info)


def _layout(regions: int) -> list[tuple[str, str, str]]:
    """(claim UID, priority, card UUID): cards of ten claims, the first of each online."""
    return [
        (f"claim-{i:04d}", "online" if i % 10 == 0 else "offline", f"GPU-{i // 10:08d}")
        for i in range(regions)
    ]


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def child(root: Path, layout_file: Path, period: float, seconds: float) -> None:
    """Run only the monitor, in the foreground, and print what it cost."""
    claims = [_claim(uid, p, uuid) for uid, p, uuid in json.loads(layout_file.read_text())]
    monitor = RegionMonitor(root, lambda: claims, period=period)
    rss_before, cpu_before, started = _rss(), time.process_time(), time.monotonic()
    durations, suspended = [], 0
    while time.monotonic() - started < seconds:
        tick = time.monotonic()
        decisions = monitor.tick()
        durations.append(time.monotonic() - tick)
        suspended = max(suspended, sum(d.suspended for d in decisions))
        time.sleep(max(0.0, period - (time.monotonic() - tick)))
    wall, cpu = time.monotonic() - started, time.process_time() - cpu_before
    print(json.dumps({
        "regions_read": len(monitor.usage()), "max_suspended": suspended,
        "cpu_percent": round(100 * cpu / wall, 3), "rss_before_bytes": rss_before,
        "rss_after_bytes": _rss(), "tick": latency_summary(durations),
    }))  # fmt: skip


def cost(regions: int, period: float, seconds: float) -> dict[str, Any]:
    """Measure the monitor over ``regions`` regions in a child process."""
    with tempfile.TemporaryDirectory(prefix="gpushare-monitor-bench-") as tmp:
        root, layout = Path(tmp), _layout(regions)
        tasks = {}
        for uid, priority, uuid in layout:
            (root / uid).mkdir()
            task = FakeTask(root / uid / "gpu.cache", [uuid], limits=[GIB], sm_limits=[10],
                            priority=0 if priority == "online" else 1)  # fmt: skip
            task.set_processes([FakeProcess(p, 1000 + p, [GIB // 8], [0]) for p in range(4)])
            tasks[uid] = task
        (root / "layout.json").write_text(json.dumps(layout))
        argv = [sys.executable, __file__, "--child", str(root), "--period", str(period),
                "--seconds", str(seconds)]  # fmt: skip
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
            busy = [tasks[uid] for uid, p, uuid in layout if p == "online" and int(uuid[4:]) % 2]
            while process.poll() is None:
                for task in busy:  # online work on half the cards, always busy
                    task.launch()
                    task.set_processes([FakeProcess(1, 1001, [GIB // 8], [10])])
                time.sleep(0.05)
            out, _ = process.communicate()
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["rss_growth_bytes"] = result["rss_after_bytes"] - result["rss_before_bytes"]
    return result


def delays(period: float, rounds: int, rng: random.Random, policy: str) -> dict[str, Any]:
    """Time suspension and resume of an offline process for online work under ``policy``."""
    with tempfile.TemporaryDirectory(prefix="gpushare-monitor-bench-") as tmp:
        root = Path(tmp)
        claims = [_claim("online", "online", "GPU-0"), _claim("offline", "offline", "GPU-0")]
        processes = {}
        for claim, priority, kind in ((claims[0], 0, policy), (claims[1], 1, "default")):
            (root / claim.uid).mkdir()
            task = FakeTask(root / claim.uid / "gpu.cache", ["GPU-0"], limits=[GIB],
                            sm_limits=[40], priority=priority, policy=kind)  # fmt: skip
            processes[claim.uid] = CudaProcess(claim.uid, task, [GIB // 2], time.monotonic)
        monitor = RegionMonitor(root, lambda: claims, period=period)
        monitor.start()
        online, offline = processes["online"], processes["offline"]
        offline.set_busy(True)
        held, resumed, again = [], [], []
        try:
            for _ in range(rounds):
                time.sleep(rng.uniform(0, period) + period)
                since = time.monotonic()
                online.set_busy(True)
                held.append(_first(offline, since, "held", 3 * period))
                time.sleep(rng.uniform(period, 3 * period))
                since = time.monotonic()
                online.set_busy(False)
                resumed.append(_first(offline, since, "resumed", 4 * period))
                again.append(_first(offline, since, "kernels run", 4 * period + 1.5))
        finally:
            monitor.stop()
            for process in processes.values():
                process.stop()
    return {
        "suspended_after_online_starts": latency_summary(held),
        "resumed_after_online_stops": latency_summary(resumed),
        "offline_kernels_after_online_stops": latency_summary(again),
    }


def _first(process: CudaProcess, since: float, what: str, limit: float) -> float:
    deadline = since + limit
    while time.monotonic() < deadline:
        changes = [after for after, event in process.fact(since).changes if event == what]
        if changes:
            return changes[0]
        time.sleep(0.005)
    raise SystemExit(f"{process.pod}: no {what!r} within {limit} s of the change")


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its table and JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--period", type=float, default=1.0, help="monitor period, seconds")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the cost run")
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.child / "layout.json", args.period, args.seconds)
        return
    period = 0.1 if args.smoke else args.period
    regions, seconds, rounds = (20, 1.0, 3) if args.smoke else (100, args.seconds, 15)
    spent = cost(regions, period, seconds)
    print(f"cost: {regions} regions, period {period} s, {seconds:.0f} s")
    print(f"  CPU {spent['cpu_percent']:.2f} % of one core (target <= {CPU_TARGET_PERCENT} %)")
    print(f"  RSS {spent['rss_before_bytes'] / 2**20:.1f} MiB before, "
          f"{spent['rss_after_bytes'] / 2**20:.1f} MiB after: "
          f"+{spent['rss_growth_bytes'] / 2**20:.2f} MiB (target <= 10 MiB)")  # fmt: skip
    tick = spent["tick"]
    print(
        f"  period work p50 {tick['p50_ms']} ms, p99 {tick['p99_ms']} ms, max {tick['max_ms']} ms"
    )
    rng = random.Random(7)  # noqa: S311 - a phase, not a secret
    timed = {}
    for isolation, policy in (("burst-share", "default"), ("fixed-share", "force")):
        timed[isolation] = delays(period, rounds, rng, policy)
        print(f"delays, online {isolation}: {rounds} rounds, period {period} s (p50 p99 max, ms)")
        for name, summary in timed[isolation].items():
            figures = " ".join(f"{summary[k]:6.0f}" for k in ("p50_ms", "p99_ms", "max_ms"))
            print(f"  {name:36} {figures}")
    emit({
        "benchmark": "monitor", "machine": machine(), "regions": regions, "period_s": period,
        "cost": spent, "delays": timed,
        "targets_met": {
            "cpu": spent["cpu_percent"] <= CPU_TARGET_PERCENT,
            "rss": spent["rss_growth_bytes"] <= RSS_TARGET_BYTES,
        },
    })  # fmt: skip


if __name__ == "__main__":
    main()
