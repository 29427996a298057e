"""hack/bench/realplane.py and realmemory.py at a tiny size, on the real control plane."""

from __future__ import annotations

import pytest
import realkube
from bench.smoke import smoke_run

pytestmark = pytest.mark.realk8s


@pytest.fixture(autouse=True)
def _binaries() -> None:
    realkube.binaries("kube-controller-manager", "kube-scheduler", "klhollow")


def test_realplane_smoke_run_binds_every_pod_down_both_paths_in_both_orders() -> None:
    """Each phase binds all its pods; only the gated path is gated (by the policy) and ungated."""
    result = smoke_run("realplane.py", timeout=400)
    assert result["benchmark"] == "realplane"
    phases = result["phases"]
    assert [(p["order"], p["path"]) for p in phases] == [
        (1, "scheduler"), (1, "gated"), (2, "gated"), (2, "scheduler"),
    ]  # fmt: skip
    for phase in phases:
        bound = phase["bound"]
        assert bound["count"] == phase["pods"] == 4
        assert 0 < bound["p50_ms"] <= bound["p99_ms"] <= bound["max_ms"]
        assert phase["cpu_ms_per_pod"]["kube-apiserver"] > 0
        assert phase["controller_rss_mb"] > 0
        requests = phase["requests_per_pod"]
        # Every pod was created once, and kube-scheduler bound each.
        assert requests["bench"]["create pods"] == 1.0
        assert requests["kube-scheduler"]["create pods/binding"] == 1.0
        controller = requests.get("gpushare-controller", {})
        # Hop by hop, from the audit log: the create first, the binding last.
        timeline = phase["timeline_ms"]
        assert next(iter(timeline)) == "bench create pods"
        binding = timeline["kube-scheduler create pods/binding"]["p50_ms"]
        assert binding == max(hop["p50_ms"] for hop in timeline.values()) > 0
        if phase["path"] == "gated":
            allocated = timeline["gpushare-controller patch resourceclaims/status"]["p50_ms"]
            assert allocated <= timeline["gpushare-controller patch pods"]["p50_ms"] <= binding
            assert phase["ungate"]["count"] == 4
            assert controller["patch pods"] == 1.0  # the gate, removed once
            assert "update resourceclaims/status" not in requests["kube-scheduler"]
            # On 1.36 the chart's policy gates the pods (a pod that came before the policy saw
            # its new template is gated by the webhook), and kube-apiserver says what it cost.
            assert phase["gated_by_policy"] >= 1
            assert phase["admission_ms_per_pod"]["MutatingAdmissionPolicy"] > 0
        else:
            assert phase["ungate"] is None
            assert "patch pods" not in controller
            assert requests["kube-scheduler"]["update resourceclaims/status"] == 1.0
            assert timeline["kube-scheduler update resourceclaims/status"]["p50_ms"] <= binding
            assert phase["gated_by_policy"] == 0
    assert set(result["acceptance"]) >= {"p99_pass", "p50_pass", "cpu_pass"}


def test_realmemory_smoke_run_places_the_probe_over_a_filled_cluster() -> None:
    """The controller starts over the claims made, places one more pod, and its RSS is read."""
    result = smoke_run("realmemory.py", timeout=300)
    assert result["benchmark"] == "realmemory"
    assert (result["nodes"], result["claims"]) == (4, 40)
    assert 0 < result["rss_bytes"] <= result["peak_rss_bytes"]
    assert result["placed_after_s"] > 0
    assert result["leading_after_s"] > 0  # from the controller's start until it led
    assert result["target"]["at_target_size"] is False


def test_gatecost_smoke_run_gates_exactly_the_claim_pods_while_the_policy_is_bound() -> None:
    """Every cell runs in both rounds; only claim pods under the bound policy come back gated."""
    result = smoke_run("gatecost.py", timeout=300)
    assert result["benchmark"] == "gatecost"
    cells = result["cells"]
    assert set(cells) == {
        f"{shape}, {policy}" for shape in ("claim", "plain") for policy in ("policy", "no policy")
    }
    for key, rounds in cells.items():
        assert len(rounds) == 2, key
        for cell in rounds:
            assert cell["create"]["count"] == 3
            assert cell["gated"] == (3 if key == "claim, policy" else 0), key
    assert set(result["summary"]) == {"claim", "plain"}
