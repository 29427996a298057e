"""hack/bench/controller.py at a tiny size: both modes allocate every pod, figures add up."""

from __future__ import annotations

from bench.smoke import smoke_run


def test_controller_benchmark_smoke_run_allocates_every_pod_in_both_modes() -> None:
    """The smoke run allocates all 40 pods with and without the controller; numbers are sane."""
    result = smoke_run("controller.py")
    assert result["benchmark"] == "controller"
    assert (result["nodes"], result["cards"]) == (4, 32)
    assert set(result["modes"]) == {"controller", "firstfit"}
    for mode, figures in result["modes"].items():
        assert figures["pods"] == figures["allocated"] == figures["bound"] == 40, mode
        for milestone in ("latency_allocated", "latency_bound"):
            latency = figures[milestone]
            assert latency["count"] == 40, (mode, milestone)
            assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"], mode
        assert figures["pods_per_s"] > 0
        requests = figures["requests"]
        assert requests["per_allocation"] == round(requests["total"] / 40, 2) > 0
        # Every pod was created through the API server, once.
        assert requests["by_verb_resource"]["create pods"] == 40
    controller, firstfit = result["modes"]["controller"], result["modes"]["firstfit"]
    # Only the controller's client is not the harness's, and it writes for every pod.
    assert controller["requests"]["driver_per_allocation"] >= 3
    assert firstfit["requests"]["driver_per_allocation"] == 0
    # Each pod's path to its ungating goes through the controller's writes, in order.
    path = controller["requests"]["driver_round_trips_create_to_ungate"]
    assert path["pods"] == 40
    assert 1 <= path["p50"] <= path["max"]
    assert len(path["median_sequence"]) == path["p50"]
    assert path["median_sequence"][-1] == "patch pods"  # the gate comes off last
    stock = firstfit["requests"]["driver_round_trips_create_to_ungate"]
    assert (stock["p50"], stock["max"]) == (0, 0)  # no driver on the stock path
    clients = controller["requests"]["per_pod_by_client"]
    ours = next(agent for agent in clients if agent.startswith("gpushare-dra-controller/"))
    # As the chart runs it, leader-elected: allocation and finalizer are patches sent together.
    assert clients[ours]["patch resourceclaims/status"] >= 1
    assert clients[ours]["patch resourceclaims"] >= 1
    # The gate comes off with a JSON patch that status updates do not conflict with: one per
    # pod (a retry after a timed-out patch is the only second one), not the 1.6 of an update.
    assert 1.0 <= clients[ours]["patch pods"] < 1.5
    assert controller["latency_ungated"]["count"] == 40
    assert firstfit["latency_ungated"]["count"] == 0
    assert controller["controller_rss_bytes"] > 0
    # The webhook process reviewed each pod once, as kube-apiserver would have sent it.
    reviews = controller["webhook_pod_reviews"]
    assert reviews["reviews"] == 40
    assert 0 < reviews["mean_ms"] <= reviews["p99_at_most_ms"] * 2
    assert reviews["p50_at_most_ms"] <= reviews["p99_at_most_ms"]
    assert firstfit["webhook_pod_reviews"] == {}
    ratio = result["controller_vs_firstfit"]
    assert ratio["throughput"] == round(controller["pods_per_s"] / firstfit["pods_per_s"], 3)


def test_paced_mode_spaces_the_pods_and_reports_the_same_figures() -> None:
    """--rate 20 creates the 40 pods over about 2 s; every figure is there for both modes."""
    result = smoke_run("controller.py", "--rate", "20")
    assert result["rate_pods_per_s"] == 20
    for mode, figures in result["modes"].items():
        assert figures["allocated"] == 40, mode
        # 39 gaps of 50 ms between the first create and the last: pacing, not a burst.
        assert figures["seconds"] >= 1.9, mode
        assert figures["cpu_ms_per_pod"]["harness"] > 0, mode
    assert result["modes"]["controller"]["latency_ungated"]["count"] == 40
