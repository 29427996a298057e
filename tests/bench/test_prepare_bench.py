"""hack/bench/prepare.py at a tiny size: the plugin answers, and the figures are consistent."""

from __future__ import annotations

from bench.smoke import smoke_run


def test_prepare_benchmark_smoke_run_prepares_everything_and_cleans_up() -> None:
    """Every call succeeds in all three modes, every size is measured, memory read, no spec left."""
    result = smoke_run("prepare.py")
    assert result["benchmark"] == "prepare"
    assert result["errors"] == []
    assert result["cdi_specs_left"] == 0
    assert result["plugin_exit_status"] == 0
    rounds = {
        "latency": result["rounds"],
        "latency_with_resident": result["rounds_with_resident"],
        "latency_plugin_alone": result["rounds"],
        "latency_claim_state": result["rounds"],
        # The claim state's target is its p99 at 1,000: as many calls as with few claims.
        "latency_claim_state_with_resident": result["rounds"],
    }
    assert rounds == {
        "latency": 4,
        "latency_with_resident": 1,
        "latency_plugin_alone": 4,
        "latency_claim_state": 4,
        "latency_claim_state_with_resident": 4,
    }
    for mode, count in rounds.items():
        for kind in ("prepare", "unprepare"):
            for size in (1, 8, 32):
                latency = result[mode][f"{kind}_{size}"]
                assert latency["count"] == count, (mode, kind, size)
                assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    memory = result["memory"]
    assert 0 < memory["idle_rss_mb"] <= memory["rss_with_64_prepared_mb"]
    assert set(result["targets"]) == {
        "prepare_1_p99_ms",
        "prepare_32_p99_ms",
        "idle_rss_mb",
        "plugin_alone_prepare_1_p99_ms",
        "plugin_alone_prepare_32_p99_ms",
        "claim_state_prepare_1_p99_ms",
        "claim_state_prepare_32_p99_ms",
    }
