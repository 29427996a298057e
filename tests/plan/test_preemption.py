"""``plan`` and preemption: which offline pods an online pod that fits nowhere would evict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest
from plan.builders import BOTH, NAMES, Object, dump, plan_of, template

from dra_driver.api import Placement
from dra_driver.cli.main import main
from dra_driver.nvml.inventory import builtin_inventory
from dra_driver.plan.errors import PlanInputError
from dra_driver.plan.inventory import inventory_cluster
from dra_driver.plan.planner import Outcome, PodPlan, PolicyPlan, make_plan
from dra_driver.plan.render import render_json, render_table
from dra_driver.plan.workload import parse_workload

NODE_1: Final = {"kubernetes.io/hostname": "node-1"}  # qgpu-runbook's one-T4 node
WORKLOAD: Final = "tests/plan/preemption-workload.yaml"


def _pod(name: str, claim_template: str, **spec: Any) -> Object:
    """Return a bare Pod on node-1 using ``claim_template``, with more ``spec`` fields."""
    body = {"containers": [{"name": "main", "image": "example"}], "nodeSelector": NODE_1}
    body["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim_template}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body | spec}


def _job(name: str, claim_template: str, parallelism: int) -> Object:
    """Return a Job of ``parallelism`` pods on node-1, labelled ``app: <name>``."""
    spec = _pod(name, claim_template)["spec"]
    template_ = {"metadata": {"labels": {"app": name}}, "spec": spec}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"parallelism": parallelism, "template": template_},
    }


def _offline(name: str = "batch-share", *, preemptible: bool | None = None) -> Object:
    """Return the offline 40-core 6Gi template; ``preemptible`` set in its GpuShareConfig."""
    body = template(name, device_class=NAMES.offline_device_class, cores="40", memory="6Gi")
    if preemptible is not None:
        parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind}
        opaque = {"driver": NAMES.driver, "parameters": parameters | {"preemptible": preemptible}}
        body["spec"]["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": opaque}]
    return body


ONLINE = template("serving-share", cores="60", memory="8Gi")
OFFLINE_60 = template(
    "big-batch", device_class=NAMES.offline_device_class, cores="60", memory="8Gi"
)


SERVING = _pod("serving", "serving-share")


def _budget(min_available: int | None = None, allowed: int | None = None) -> Object:
    """Return a PodDisruptionBudget of the batch Job's pods."""
    spec: Object = {"selector": {"matchLabels": {"app": "batch"}}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    body: Object = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "batch"},
        "spec": spec,
    }
    if allowed is not None:
        body["status"] = {"disruptionsAllowed": allowed}
    return body


def _pods(result: PolicyPlan) -> dict[str, PodPlan]:
    return {p.name: p for p in result.pods}


def _card_use(result: PolicyPlan) -> tuple[int, int]:
    """Return node-1's card's used cores and GiB."""
    (card,) = [c for c in result.cards if c.card.node == "node-1"]
    return int(card.cores_used), int(card.memory_used / 2**30)


def test_an_online_pod_evicts_exactly_one_of_two_offline_shares() -> None:
    """Two 40-core 6Gi offline shares fill the card; 60 cores 8Gi online evicts the younger."""
    text = dump(_offline(), ONLINE, _job("batch", "batch-share", 2), SERVING)
    for result in plan_of(text).policies:
        pods = _pods(result)
        serving = pods["serving"]
        assert (serving.outcome, serving.node) == (Outcome.PREEMPTS, "node-1")
        assert serving.victims == ("default/batch-1",)
        assert serving.reason == "would evict default/batch-1 on node-1"
        assert [s.device for s in serving.shares] == ["gpu-0"]
        assert pods["batch-0"].outcome is Outcome.PLACED
        evicted = pods["batch-1"]
        assert (evicted.outcome, evicted.node, evicted.shares) == (Outcome.EVICTED, None, ())
        assert evicted.reason == (
            "evicted from node-1 to make room for online pod default/serving; its Job/batch "
            "would re-create it, to wait for room"
        )
        assert _card_use(result) == (100, 14)  # batch-0 and serving, not batch-1


def test_an_offline_pod_never_preempts() -> None:
    """An offline pod that fits nowhere waits: both batch shares keep running."""
    text = dump(_offline(), OFFLINE_60, _job("batch", "batch-share", 2), _pod("late", "big-batch"))
    for result in plan_of(text).policies:
        pods = _pods(result)
        assert (pods["late"].outcome, pods["late"].victims) == (Outcome.PENDING, ())
        assert [pods[n].outcome for n in ("batch-0", "batch-1")] == [Outcome.PLACED] * 2
        assert _card_use(result) == (80, 12)


def test_preemptible_false_exempts_the_offline_pods() -> None:
    """Offline shares with preemptible: false are never victims; the online pod waits."""
    text = dump(
        _offline(preemptible=False),
        ONLINE,
        _job("batch", "batch-share", 2),
        _pod("serving", "serving-share"),
    )
    for result in plan_of(text).policies:
        pods = _pods(result)
        assert (pods["serving"].outcome, pods["serving"].victims) == (Outcome.PENDING, ())
        assert result.count(Outcome.EVICTED) == 0
        assert _card_use(result) == (80, 12)


def test_only_the_preemptible_share_is_evicted() -> None:
    """One exempt share and one preemptible one: the preemptible one goes, whatever its age."""
    text = dump(
        _offline("exempt", preemptible=False),
        _offline("evictable", preemptible=True),
        ONLINE,
        _pod("evictable", "evictable"),
        _pod("exempt", "exempt"),
        _pod("serving", "serving-share"),
    )
    for result in plan_of(text).policies:
        assert _pods(result)["serving"].victims == ("default/evictable",)
        assert _pods(result)["evictable"].reason == (
            "evicted from node-1 to make room for online pod default/serving; a bare Pod is not "
            "re-created"
        )


def test_preemption_policy_never_waits_instead() -> None:
    """An online pod with preemptionPolicy: Never evicts no one."""
    serving = _pod("serving", "serving-share", preemptionPolicy="Never")
    text = dump(_offline(), ONLINE, _job("batch", "batch-share", 2), serving)
    (result,) = plan_of(text, policies=[Placement.BINPACK]).policies
    assert (_pods(result)["serving"].outcome, result.count(Outcome.EVICTED)) == (Outcome.PENDING, 0)


@pytest.mark.parametrize(
    ("budget", "blocked"),
    [
        (_budget(min_available=2), True),
        (_budget(min_available=1), False),
        (_budget(allowed=0), True),
        (_budget(min_available=2, allowed=1), False),  # the status, when given, is what counts
    ],
    ids=["min-2-of-2", "min-1-of-2", "status-0", "status-1"],
)
def test_a_budget_of_the_file_blocks_or_allows_the_eviction(budget: Object, blocked: bool) -> None:
    """A PodDisruptionBudget of the file: computed from the running pods, or its status."""
    text = dump(
        _offline(),
        ONLINE,
        _job("batch", "batch-share", 2),
        budget,
        _pod("serving", "serving-share"),
    )
    (result,) = plan_of(text, policies=[Placement.BINPACK]).policies
    serving = _pods(result)["serving"]
    if blocked:
        assert serving.outcome is Outcome.PENDING
        assert (serving.reason or "").endswith(
            "; would fit after evicting offline pods, but PodDisruptionBudget default/batch "
            "allows no more disruptions"
        )
    else:
        assert (serving.outcome, serving.victims) == (Outcome.PREEMPTS, ("default/batch-1",))


def test_a_budget_counts_the_evictions_already_planned() -> None:
    """A status allowing one eviction: the first online pod evicts, the second is blocked."""
    small = template("online-20", cores="20", memory="4Gi")
    batch = template("batch-30", device_class=NAMES.offline_device_class, cores="30", memory="4Gi")
    text = dump(
        batch,
        small,
        _job("batch", "batch-30", 3),  # 90 cores, 12Gi of 100, 15Gi
        _budget(allowed=1),
        _pod("first", "online-20"),
        _pod("second", "online-20"),
    )
    (result,) = plan_of(text, policies=[Placement.BINPACK]).policies
    pods = _pods(result)
    assert (pods["first"].outcome, pods["first"].victims) == (
        Outcome.PREEMPTS,
        ("default/batch-2",),
    )
    assert pods["second"].outcome is Outcome.PENDING
    assert (pods["second"].reason or "").endswith(
        "but PodDisruptionBudget default/batch allows no more disruptions"
    )


def test_a_malformed_budget_in_the_file_is_refused_naming_the_field() -> None:
    """minAvailable must be a number or a percentage: the file, document and field are named."""
    bad = _budget() | {"spec": {"minAvailable": "half", "selector": {}}}
    with pytest.raises(PlanInputError) as caught:
        parse_workload(dump(_offline(), bad), "work.yaml")
    assert str(caught.value) == (
        "work.yaml: document 2 (PodDisruptionBudget batch): spec.minAvailable: expected a whole "
        "number or a percentage, got 'half'"
    )


def test_a_quota_holding_the_preempting_pod_back_still_names_its_victims() -> None:
    """As the controller: the victims go first; a quota then holds the pod, and says after what."""
    quota = {
        "apiVersion": NAMES.quota_api_version,
        "kind": "GpuShareQuota",
        "metadata": {"name": "online", "namespace": "default"},
        "spec": {"hard": {"cores": "100"}, "priority": "online"},
    }
    inventory = builtin_inventory("qgpu-runbook")
    cluster = inventory_cluster(NAMES, inventory, "inventory", quotas=(quota,))
    other = _pod("other", "serving-share", nodeSelector={"kubernetes.io/hostname": "node-2"})
    text = dump(_offline(), ONLINE, _job("batch", "batch-share", 2), other, SERVING)
    workload = parse_workload(text, "work.yaml")
    (result,) = make_plan(NAMES, cluster, workload, [Placement.BINPACK]).policies
    serving = _pods(result)["serving"]
    assert (serving.outcome, serving.victims) == (Outcome.QUOTA, ("default/batch-1",))
    assert serving.reason == (
        "GpuShareQuota default/online: cores used 60, asked 60, hard 100 "
        "(after evicting default/batch-1 on node-1)"
    )


def test_the_table_and_json_report_the_preemption() -> None:
    """PREEMPTS beside the node, EVICTED for the victim, victims in JSON, evictions counted."""
    text = dump(_offline(), ONLINE, _job("batch", "batch-share", 2), SERVING)
    plan = plan_of(text, policies=BOTH)
    lines = render_table(plan).splitlines()
    assert next(line for line in lines if line.startswith("serving ")).split() == [
        "serving", "node-1", "PREEMPTS", "node-1", "PREEMPTS",
    ]  # fmt: skip
    assert next(line for line in lines if line.startswith("batch-1 ")).split() == [
        "batch-1", "EVICTED", "EVICTED",
    ]  # fmt: skip
    assert "    why (binpack, spread): would evict default/batch-1 on node-1" in lines
    assert lines[-1] == (
        "placed 2/3 pods (binpack), 2/3 (spread); offline pods evicted: 1 (binpack), 1 (spread)"
    )
    binpack = json.loads(render_json(plan))["policies"][0]
    pods = {p["name"]: p for p in binpack["pods"]}
    assert (pods["serving"]["outcome"], pods["serving"]["victims"]) == (
        "preempts",
        ["default/batch-1"],
    )
    assert (pods["batch-1"]["outcome"], pods["batch-1"]["node"]) == ("evicted", None)
    assert (binpack["summary"]["preempts"], binpack["summary"]["evicted"]) == (1, 1)


def test_the_readme_shows_what_plan_prints_for_the_preemption_example(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's preemption example is the plan's output, line for line."""
    root = Path(__file__).resolve().parents[2]
    command = "gpushare-dra plan --inventory qgpu-runbook --workload " + WORKLOAD
    readme = (root / "README.md").read_text()
    shown = readme.split(f"$ {command}\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(root)
    assert main(command.split()[1:], environ={}) == 0
    assert capsys.readouterr().out == shown


def test_no_preemption_plans_as_a_controller_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    """--no-preemption: the online pod waits and both batch pods keep running."""
    root = Path(__file__).resolve().parents[2]
    argv = ["plan", "--inventory", "qgpu-runbook", "--workload", str(root / WORKLOAD)]
    assert main([*argv, "--no-preemption", "--policy", "binpack", "-o", "json"], environ={}) == 0
    (binpack,) = json.loads(capsys.readouterr().out)["policies"]
    outcomes = {p["name"]: (p["outcome"], p["victims"]) for p in binpack["pods"]}
    assert outcomes == {
        "batch-0": ("placed", []),
        "batch-1": ("placed", []),
        "serving-0": ("pending", []),
    }
