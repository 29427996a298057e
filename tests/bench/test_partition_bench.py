"""hack/bench/partition.py at its smoke size: each component recovers within the promised bound."""

from __future__ import annotations

from bench.smoke import smoke_run


def test_partition_smoke_run_recovers_within_one_watch_and_one_request_timeout() -> None:
    """Every measured recovery happens, and within a watch timeout plus a request timeout."""
    result = smoke_run("partition.py")
    assert result["benchmark"] == "partition"
    assert result["timeouts"] == {"connect": 1.0, "request": 1.0, "watch": 2}
    measures = {
        "controller_next_pod_s",
        "controller_release_s",
        "plugin_next_pod_s",
        "plugin_slice_s",
    }
    assert set(result["recovery"]) == measures
    for figures in result["recovery"].values():
        assert figures["count"] == 1
    # The bound leaves the work itself out; a few seconds for it on a busy 2-core machine.
    assert 0 < result["worst_s"] < result["bound_s"] + 10
