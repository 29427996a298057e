"""hack/bench/allocator.py at a tiny size: it runs, and its figures are consistent."""

from __future__ import annotations

from bench.smoke import smoke_run


def test_allocator_benchmark_smoke_run_reports_every_cell() -> None:
    """The smoke run covers sizes x occupancies x policies, and every number adds up."""
    result = smoke_run("allocator.py")
    assert result["benchmark"] == "allocator"
    cells = result["cells"]
    assert {(c["nodes"], c["occupancy_target"], c["policy"]) for c in cells} == {
        (n, o, p) for n in (4, 8) for o in (0.0, 0.9) for p in ("binpack", "spread")
    }
    for cell in cells:
        latency = cell["latency"]
        assert latency["count"] == 40
        assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
        outcomes = cell["outcomes"].values()
        assert sum(o["placed"] + o["unplaceable"] for o in outcomes) == 40
        assert cell["latency_placed"]["count"] == sum(o["placed"] for o in outcomes)
        assert cell["latency_cold"]["count"] == 5
        assert cell["decisions_per_s"] > 0
        assert abs(cell["occupancy_actual"] - cell["occupancy_target"]) < 0.1
        assert cell["overcommitted_nodes"] == 0
    assert set(result["growth_p50_vs_smallest"]) == {"4", "8"}
    assert result["targets"] == {}  # no 1,000-node cell in a smoke run
