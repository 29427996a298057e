"""The bounded reliability run: real processes killed under API faults, then the invariants."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpushare_simulator.harness.faultrun import FaultRun, FaultRunSettings


@pytest.mark.parametrize(
    ("controllers", "cycles", "elect"),
    [(1, 8, False), (2, 6, False), (2, 6, True)],
    ids=["kill-and-restart", "two-controllers-racing", "two-controllers-leader-elected"],
)
def test_a_run_with_kills_and_api_faults_ends_sound(
    work_dir: Path, controllers: int, cycles: int, elect: bool
) -> None:
    """Kills, API errors, hangs and partitions: the final state is sound and every pod runs."""
    settings = FaultRunSettings(
        cycles=cycles, controllers=controllers, leader_elect=elect, seed=controllers + elect
    )
    report = FaultRun(settings, work_dir).run()
    assert report.violations == []
    assert report.cycles == cycles
    assert sum(report.kills.values()) == cycles
    assert report.faults["conflict"] + report.faults["server-error"] > 0
    # The hangs fired too: each cost a component one timeout, none left anything stuck.
    assert report.faults["hung-write-answer"] == report.faults["hung-first-watch"] == 1
    assert report.pods_created > report.pods_deleted
    assert report.pods_running == report.pods_created - report.pods_deleted
