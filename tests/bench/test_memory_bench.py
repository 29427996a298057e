"""hack/bench/memory.py at a tiny size: both modes place the probe pod and report memory."""

from __future__ import annotations

from bench.smoke import smoke_run


def test_memory_benchmark_smoke_run_measures_both_modes() -> None:
    """The smoke run measures the controller slimmed and unslimmed, with sane figures."""
    result = smoke_run("memory.py", timeout=200)
    assert result["benchmark"] == "memory"
    assert (result["nodes"], result["cards"], result["claims"]) == (10, 80, 100)
    assert set(result["modes"]) == {"slimmed", "unslimmed"}
    for figures in result["modes"].values():
        assert 30 * 10**6 < figures["rss_bytes"] <= figures["peak_rss_bytes"] < 10**9
        assert figures["start_to_placed_s"] > 0
    ratio = result["modes"]["slimmed"]["rss_bytes"] / result["modes"]["unslimmed"]["rss_bytes"]
    assert result["rss_ratio_slimmed_to_unslimmed"] == round(ratio, 3)
    assert result["target"]["at_target_size"] is False
