#!/usr/bin/env python3
"""The full reliability run: 100 kill/restart cycles under API faults, then the invariants.

The same run as tests/faults (see simulator/gpushare_simulator/harness/faultrun.py for what
happens in a cycle and what is checked), at full size: three nodes of two cards, two controller
replicas racing without leader election, and every cycle SIGKILLs the controller or a plugin at a
random moment and restarts it. Prints the report, then one JSON line; exits 1 on any
violation.

    python hack/faults.py                     # 100 cycles, about 4 minutes on 2 cores
    python hack/faults.py --cycles 20 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from gpushare_simulator.harness.faultrun import FaultRun, FaultRunSettings


def main() -> int:
    """Run, print, and return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--cards", type=int, default=2)
    parser.add_argument("--controllers", type=int, default=2)
    parser.add_argument("--pods-per-cycle", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="controllers leader-elected, as the chart runs them (default: racing without)",
    )
    args = parser.parse_args()
    settings = FaultRunSettings(
        nodes=args.nodes,
        cards=args.cards,
        cycles=args.cycles,
        pods_per_cycle=args.pods_per_cycle,
        controllers=args.controllers,
        leader_elect=args.leader_elect,
        settle_seconds=180.0,
        seed=args.seed,
    )
    # Unix socket paths must stay under 108 bytes.
    work_dir = Path(tempfile.mkdtemp(prefix="gsf-", dir="/tmp"))
    report = FaultRun(settings, work_dir).run()
    if report.violations:
        # The components' logs are the only record of how a rare failure came about.
        print(f"kept for the components' logs: {work_dir}")
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
    result = report.to_json()
    print(f"cycles {report.cycles}, kills {dict(report.kills)}, faults {dict(report.faults)}")
    print(f"exited on their own and restarted: {dict(report.exits) or 'none'}")
    print(f"pods created {report.pods_created}, deleted {report.pods_deleted}, running "
          f"{report.pods_running}; {report.seconds} s")  # fmt: skip
    for violation in report.violations:
        print(f"VIOLATION: {violation}")
    print("invariants: " + ("all hold" if not report.violations else "VIOLATED"))
    line = {"run": "faults", "cpus": os.cpu_count(), "settings": vars(args), **result}
    print(json.dumps(line, sort_keys=True), flush=True)
    return 0 if not report.violations else 1


if __name__ == "__main__":
    sys.exit(main())
