"""hack/bench/monitor.py at a tiny size: it measures cost and delays, and they add up."""

from __future__ import annotations

from bench.smoke import smoke_run


def test_monitor_benchmark_smoke_run_measures_cost_and_delays() -> None:
    """The monitor read every region, suspended offline work, and each delay was timed."""
    result = smoke_run("monitor.py")
    assert result["benchmark"] == "monitor"
    cost = result["cost"]
    assert cost["regions_read"] == result["regions"] == 20
    assert cost["max_suspended"] == 9  # one busy online card of two: its nine offline claims
    assert cost["tick"]["count"] >= 5
    assert cost["rss_before_bytes"] > 0
    assert cost["cpu_percent"] > 0
    period_ms = result["period_s"] * 1000
    assert set(result["delays"]) == {"burst-share", "fixed-share"}
    for delays in result["delays"].values():
        held = delays["suspended_after_online_starts"]
        resumed = delays["resumed_after_online_stops"]
        assert held["count"] == resumed["count"] == 3
        assert 0 <= held["max_ms"] <= 3 * period_ms
        assert 0 < resumed["max_ms"] <= 4 * period_ms
        assert delays["offline_kernels_after_online_stops"]["p50_ms"] >= resumed["p50_ms"]
