"""hack/load.py at a bounded size: 3 waves of 60 pods on 10 nodes, end state and memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WAVES, PODS, NODES, REAL_PLUGINS = 3, 60, 10, 2
RUN_TIMEOUT_S = 300
"""Three waves that each wait out --timeout twice, with the report (about 30 s when sound)."""

# The module's run is set up by the first test: its timeout must outlast the run's own.
pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + 30)


def _text(captured: str | bytes | None) -> str:
    """Return what a timed-out run had written (bytes or text, as the platform gives it)."""
    if isinstance(captured, bytes):
        return captured.decode(errors="replace")
    return captured or ""


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """Run the load script once for this module and return its JSON line."""
    try:
        done = subprocess.run(
            [
                sys.executable, str(ROOT / "hack/load.py"),
                "--waves", str(WAVES), "--pods", str(PODS), "--nodes", str(NODES),
                "--real-plugins", str(REAL_PLUGINS), "--timeout", "40",
            ],
            capture_output=True,
            text=True,
            check=False,  # exit 1 only says a check failed; the tests say which
            timeout=RUN_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired as hung:
        pytest.fail(
            f"hack/load.py still ran after {RUN_TIMEOUT_S} s; stdout:\n{_text(hung.stdout)[-3000:]}"
            f"\nstderr (the hang's stacks):\n{_text(hung.stderr)[-12000:]}"
        )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    report = f"exit {done.returncode} without a report; stderr ends:\n{done.stderr[-4000:]}"
    assert last.startswith("{"), report
    result: dict[str, Any] = json.loads(last)
    return result


def test_every_wave_runs_all_its_pods_and_leaves_nothing_behind(report: dict[str, Any]) -> None:
    """Each wave's pods all get allocated and run, and deleting them leaves no trace anywhere."""
    assert report["benchmark"] == "load"
    assert len(report["waves"]) == WAVES
    for number, wave in enumerate(report["waves"], 1):
        stuck = json.dumps(wave.get("stuck"), indent=1)
        assert wave["created"] == wave["allocated"] == wave["running"] == PODS, (number, stuck)
        assert wave["success_rate"] == 1.0
        assert wave["shared_claims"] == PODS // 10 // 4
        assert wave["latency_running"]["count"] == PODS
        assert wave["violations_under_load"] == []
        where = json.dumps(wave.get("stuck_cleanup"), indent=1)
        assert (wave["leftover_count"], wave["leftovers"]) == (0, []), (number, where)


def test_memory_is_sampled_per_wave_for_the_controller_and_plugin_processes(
    report: dict[str, Any],
) -> None:
    """RSS of the controller and of each real plugin process is read after every wave."""
    processes = {"controller", *(f"plugin/gpu-node-{n}" for n in range(1, REAL_PLUGINS + 1))}
    for wave in report["waves"]:
        for sample in ("rss", "rss_at_peak"):
            assert set(wave[sample]) == processes
            assert all(value > 0 for value in wave[sample].values())
    memory = report["memory"]
    assert memory["compared"] == [2, WAVES]
    assert memory["pods_between"] == PODS * (WAVES - 2)
    # Sixty pods are too few for a verdict (arena steps dwarf them); hack/load.py gives one.
    assert memory["passed"] is None
    second, last = report["waves"][1]["rss"], report["waves"][-1]["rss"]
    assert memory["growth_bytes"] == {name: last[name] - second[name] for name in processes}


def test_the_controller_counts_every_card_free_after_each_deletion_wave(
    report: dict[str, Any],
) -> None:
    """After a deletion wave the controller's own accounting shows every card free again."""
    assert [wave["controller_cards_taken"] for wave in report["waves"]] == [0] * WAVES
    assert report["passed"]
