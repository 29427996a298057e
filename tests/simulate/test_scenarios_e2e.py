"""The eight acceptance scenarios end to end: the real components on the harness.

Each test runs a scenario exactly as ``gpushare-dra simulate`` does and then asserts, on the
report itself, the facts the scenario is about: where each pod landed (card UUID and PCI bus
ID), what it consumed, what its container is told and why a pod waits. With
GPUSHARE_KUBE_BINARIES set, the same tests run against a real control plane.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gpushare_simulator.settings import SCENARIO_NAMES
from gpushare_simulator.simulate import runner as runner_module
from gpushare_simulator.simulate.checks import PodIs
from gpushare_simulator.simulate.command import examples_dir
from gpushare_simulator.simulate.manifests import load_manifest
from gpushare_simulator.simulate.observe import PodFact, ShareFact
from gpushare_simulator.simulate.runner import Runner, ScenarioReport
from gpushare_simulator.simulate.scenarios import (
    BAD_INPUT,
    ISOLATION,
    ONLINE_OFFLINE,
    PLACEMENT,
    PREEMPTION,
    QUOTA,
    SCENARIOS,
    SHARING,
    WHOLE_CARD,
    Scenario,
    Step,
)
from gpushare_simulator.simulate.stack import Stack
from simulate.kit import NAMES

from dra_driver.controller.settings import ControllerSettings
from dra_driver.nvml.inventory import builtin_inventory
from dra_driver.usage.model import PublishedCard

GIB = 1024**3
NODE1_CARD = "GPU-26975e32-62e5-543b-ac29-e97c231c6291"
NODE2_CARD0 = "GPU-4b56cb71-7424-5684-9f9d-6b522f839e9e"
NODE2_CARD1 = "GPU-fb98fefd-d57a-5152-aa06-0fa05bc5be92"


def run(runner: Runner, scenario: Scenario) -> ScenarioReport:
    manifest = load_manifest(examples_dir() / scenario.manifest)
    report = runner.run(scenario, manifest, scenario.name)
    failures = [f for step in report.steps for f in step.failures]
    assert report.passed, failures
    return report


def pod(report: ScenarioReport, step: int, name: str) -> PodFact:
    found = report.steps[step - 1].snapshot.pod(name)
    assert found is not None, f"no pod {name} after step {step}"
    return found


def share(fact: PodFact) -> ShareFact:
    (only,) = fact.shares
    return only


def card(fact: PodFact) -> PublishedCard:
    found = share(fact).card
    assert found is not None, f"pod {fact.name} has no card"
    return found


def test_the_scenarios_are_the_eight_of_the_docs() -> None:
    """The scenario names are docs/scenarios.md's eight, in order; the CLI offers exactly them."""
    assert [s.name for s in SCENARIOS] == list(SCENARIO_NAMES)
    assert [s.manifest for s in SCENARIOS] == [f"{name}.yaml" for name in SCENARIO_NAMES]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "scenarios.md").read_text()
    headings = re.findall(r"^## (\S+)$", doc, re.MULTILINE)
    assert headings == list(SCENARIO_NAMES)


def test_whole_card(runner: Runner) -> None:
    """No request takes all of node-1's card; the second pod waits, then runs when it is free."""
    report = run(runner, WHOLE_CARD)
    first, waiting = pod(report, 1, "train-1-0"), pod(report, 1, "train-2-0")
    assert (first.phase, first.node, first.owner) == ("Running", "node-1", "Job/train-1")
    assert (card(first).uuid, card(first).pci_bus_id) == (NODE1_CARD, "0000:00:08.0")
    assert (share(first).cores, share(first).memory) == (100, 15 * GIB)
    assert first.env["trainer"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "15360m"
    assert first.env["trainer"]["CUDA_DEVICE_SM_LIMIT_0"] == "100"
    assert (waiting.phase, waiting.node, waiting.env) == ("Pending", None, {})
    assert share(waiting).card is None
    assert waiting.reason is not None
    assert "request gpu: no card with 100 cores, 15Gi memory free" in waiting.reason
    assert "(closest: node-1/gpu-0 has 0 cores, 0 memory free)" in waiting.reason
    node1 = report.steps[0].snapshot.cards[0]
    assert (node1.card.node, len(node1.shares), node1.cores_used, node1.memory_used) == (
        "node-1",
        1,
        100,
        15 * GIB,
    )
    assert pod(report, 2, "train-1-0").phase == "Succeeded"
    runs = pod(report, 2, "train-2-0")
    assert (runs.phase, card(runs)) == ("Running", card(first))
    assert runs.env["trainer"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "15360m"


def test_sharing(runner: Runner) -> None:
    """5Gi/40 and 5Gi/30 run at once on node-1's card, each told 5120 MiB and its cores."""
    report = run(runner, SHARING)
    a, b = pod(report, 1, "infer-a-0"), pod(report, 1, "infer-b-0")
    assert card(a) == card(b)
    assert card(a).uuid == NODE1_CARD
    assert (share(a).cores, share(a).memory) == (40, 5 * GIB)
    assert (share(b).cores, share(b).memory) == (30, 5 * GIB)
    for fact, cores in ((a, "40"), (b, "30")):
        env = fact.env["server"]
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5120m"
        assert env["CUDA_DEVICE_SM_LIMIT_0"] == cores
        assert env["GPUSHARE_MEMORY_BYTES_0"] == str(5 * GIB)
        assert env["GPUSHARE_DEVICE_UUIDS"] == NODE1_CARD
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    use = report.steps[0].snapshot.cards[0]
    assert (len(use.shares), use.whole, use.cores_used, use.memory_used) == (2, False, 70, 10 * GIB)


def test_placement(runner: Runner) -> None:
    """binpack: one PCI bus ID for both; spread: two; cores 100 alone: 100 cores and 15Gi."""
    report = run(runner, PLACEMENT)
    packed = {card(pod(report, 1, f"infer-binpack-{i}")).pci_bus_id for i in (0, 1)}
    assert packed == {"0000:00:08.0"}
    assert [len(c.shares) for c in report.steps[0].snapshot.cards] == [0, 2, 0]
    assert report.steps[1].snapshot.pod("infer-binpack-0") is None
    spread = [card(pod(report, 2, f"infer-spread-{i}")) for i in (0, 1)]
    assert [c.uuid for c in spread] == [NODE2_CARD0, NODE2_CARD1]
    assert [c.pci_bus_id for c in spread] == ["0000:00:08.0", "0000:00:09.0"]
    trainer = pod(report, 3, "trainer")
    assert (trainer.node, card(trainer).uuid) == ("node-1", NODE1_CARD)
    assert (share(trainer).cores, share(trainer).memory) == (100, 15 * GIB)
    assert trainer.env["trainer"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "15360m"


def test_isolation(runner: Runner) -> None:
    """force, default and disable for fixed-share, burst-share and best-effort; memory capped."""
    report = run(runner, ISOLATION)
    expected = {"fixed-share": "force", "burst-share": "default", "best-effort": "disable"}
    for name, policy in expected.items():
        fact = pod(report, 1, name)
        env = fact.env["worker"]
        assert env["GPU_CORE_UTILIZATION_POLICY"] == policy
        assert env["GPUSHARE_ISOLATION"] == name
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
        assert (share(fact).isolation, card(fact).uuid) == (name, NODE1_CARD)
    # On the GPU: a lone burst-share bursts; a busy peer ends it; best-effort is never limited.
    alone, peers, three = (report.steps[n].snapshot for n in (1, 2, 3))
    assert [(t.pod, t.limited) for t in alone.tasks] == [("burst-share", False)]
    assert {(t.pod, t.limited, t.held) for t in peers.tasks} == {
        ("burst-share", True, False),
        ("fixed-share", True, False),
    }
    assert {t.pod: t.limited for t in three.tasks}["best-effort"] is False


def test_online_offline(runner: Runner) -> None:
    """online and offline on one card: CUDA_TASK_PRIORITY 0 and 1, 5120m and 8192m."""
    report = run(runner, ONLINE_OFFLINE)
    online, offline = pod(report, 1, "infer-0"), pod(report, 1, "batch-0")
    assert card(online) == card(offline)
    assert (share(online).priority, share(offline).priority) == ("online", "offline")
    assert online.env["server"]["CUDA_TASK_PRIORITY"] == "0"
    assert offline.env["worker"]["CUDA_TASK_PRIORITY"] == "1"
    assert online.env["server"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5120m"
    assert offline.env["worker"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
    assert (share(online).cores + share(offline).cores) == 100
    # On the GPU: held within a pass of online work starting, resumed within two of it ending,
    # and never losing the memory it holds.
    busy, idle = report.steps[2].snapshot, report.steps[3].snapshot
    held, resumed = busy.task("batch-0"), idle.task("batch-0")
    assert held is not None
    assert resumed is not None
    assert (held.held, held.sm_util, resumed.held) == (True, 0, False)
    assert next(t for t, what in held.changes if what == "held") <= 1.5
    assert next(t for t, what in resumed.changes if what == "resumed") <= 2.5
    assert held.memory == resumed.memory == 4 * GIB


def test_bad_input(runner: Runner) -> None:
    """Four bad objects are refused naming their field; the running pod is untouched."""
    report = run(runner, BAD_INPUT)
    before, after = pod(report, 1, "infer-0"), pod(report, 2, "infer-0")
    assert after == before
    assert after.phase == "Running"
    refused = report.steps[1].refused
    assert list(refused) == [
        "ResourceClaimTemplate/too-much-memory",
        "ResourceClaim/bad-isolation",
        "ResourceClaimTemplate/unknown-field",
        "ResourceClaimTemplate/too-large",
    ]
    webhook = 'admission webhook "validate.gpushare.dra.dev" denied the request: '
    assert refused["ResourceClaimTemplate/too-much-memory"] == (
        webhook + "spec.spec.devices.requests[0].exactly.capacity.requests[memory]: "
        'Invalid value: "16Gi": must be at most 15Gi, the memory of the largest '
        "gpushare.dra.dev card in the cluster"
    )
    assert refused["ResourceClaim/bad-isolation"].startswith(
        webhook + 'spec.devices.config[0].opaque.parameters.isolation: Unsupported value: "fast"'
    )
    assert refused["ResourceClaimTemplate/unknown-field"].startswith(
        webhook + "spec.spec.devices.config[0].opaque.parameters.priorty: Unknown field"
    )
    assert (
        "spec.spec.devices.config[0].opaque.parameters: Too long"
        in (refused["ResourceClaimTemplate/too-large"])
    )
    assert [len(c.shares) for c in report.steps[1].snapshot.cards] == [1, 0, 0]


def test_quota(runner: Runner) -> None:
    """Two 50-core 5Gi shares fill the quota; the third waits on it, then runs where a left."""
    report = run(runner, QUOTA)
    a, b = pod(report, 1, "infer-a-0"), pod(report, 1, "infer-b-0")
    assert {card(a).uuid, card(b).uuid} <= {NODE2_CARD0, NODE2_CARD1}
    assert [(share(f).cores, share(f).memory) for f in (a, b)] == [(50, 5 * GIB)] * 2
    held = pod(report, 2, "infer-c-0")
    assert (held.phase, held.node, held.event, share(held).card) == (
        "Pending",
        None,
        "QuotaExceeded",
        None,
    )
    assert held.reason == (
        "GpuShareQuota quota/gpu: cores used 100, asked 50, hard 100; "
        "GpuShareQuota quota/gpu: memory used 10Gi, asked 5Gi, hard 10Gi"
    )
    # node-2 had room: 100 of its 200 cores were free while infer-c waited.
    assert sum(use.cores_used for use in report.steps[1].snapshot.cards) == 100
    runs = pod(report, 3, "infer-c-0")
    assert (runs.phase, card(runs), runs.event) == ("Running", card(a), None)
    assert report.steps[2].snapshot.pod("infer-a-0") is None
    for step in report.steps:
        (quota,) = step.snapshot.quotas
        assert (quota.used, quota.exceeded) == (
            {"cores": "100", "memory": "10Gi", "cards": "0"},
            "False",
        )


def test_preemption(runner: Runner) -> None:
    """Two offline 40/6Gi shares, then online 60/8Gi: one is evicted, the service gets the card."""
    report = run(runner, PREEMPTION)
    batch = [pod(report, 1, name) for name in ("batch-1", "batch-2")]
    assert {card(fact).uuid for fact in batch} == {NODE1_CARD}
    service = pod(report, 2, "serving-0")
    assert (service.phase, card(service).uuid) == ("Running", NODE1_CARD)
    assert (share(service).cores, share(service).memory) == (60, 8 * GIB)
    left = [name for name in ("batch-1", "batch-2") if report.steps[1].snapshot.pod(name)]
    assert len(left) == 1
    kept = pod(report, 2, left[0])
    assert (kept.phase, card(kept).uuid, share(kept).cores) == ("Running", NODE1_CARD, 40)


def test_status_names_the_pod_the_quota_holds_with_the_controllers_event(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """status, run on the cluster while infer-c waits, counts the quota and lists infer-c."""
    steps = tuple(dataclasses.replace(step, checks=()) for step in QUOTA.steps[:2])
    kept = dataclasses.replace(QUOTA, name="quota-status", steps=steps)
    with monkeypatch.context() as patched:
        patched.setattr(runner.ops, "clean", lambda _: None)
        runner.run(kept, load_manifest(examples_dir() / QUOTA.manifest), kept.name)
    kubeconfig = str(runner.ops.cluster.kubeconfig())
    try:
        # A process of its own, as an operator runs it: its logging is not the components'.
        status = [sys.executable, "-m", "dra_driver", "status", "--kubeconfig", kubeconfig]
        done = subprocess.run(
            [*status, "-o", "json"], capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        runner.ops.clean(kept.name)
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    (quota,) = view["quotas"]
    assert (quota["name"], quota["claims"], quota["exceeded"]) == ("gpu", 2, [])
    assert quota["limits"] == {
        "cores": {"used": "100", "hard": "100"},
        "memory": {"used": "10Gi", "hard": "10Gi"},
    }
    assert quota["waiting"] == ["quota-status/infer-c-0"]
    (waiting,) = view["waiting"]
    assert waiting["waitsOnQuota"] is True
    assert waiting["reason"].startswith(
        "QuotaExceeded: GpuShareQuota quota-status/gpu: cores used 100, asked 50, hard 100"
    )


def test_without_the_node_monitor_the_priority_expectations_fail() -> None:
    """Monitor off: nobody acts on the regions, so the offline work is never held: FAIL."""
    inventory = builtin_inventory("qgpu-runbook")
    settings = ControllerSettings(leader_elect=False)
    with Stack(NAMES, inventory, settings, monitor_period=0) as stack:
        runner = Runner(stack, NAMES, lambda _: None)
        report = runner.run(
            ONLINE_OFFLINE, load_manifest(examples_dir() / ONLINE_OFFLINE.manifest), "no-monitor"
        )
    assert not report.passed
    assert "batch-0: expected its kernels held, they are running" in report.steps[2].failures
    assert report.steps[0].failures == []


def test_a_failed_expectation_is_reported_with_what_happened(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expectation that does not hold fails the scenario and says what was seen instead."""
    monkeypatch.setattr(runner_module, "CHECK_SECONDS", 0.2)
    wrong = Scenario(
        "wrong",
        "sharing, expecting the wrong share",
        SHARING.manifest,
        (Step("apply", SHARING.steps[0].actions, (PodIs("infer-a-0", "Running", cores="50"),)),),
    )
    report = runner.run(wrong, load_manifest(examples_dir() / SHARING.manifest), "wrong")
    assert not report.passed
    assert report.steps[0].failures == ["pod infer-a-0: expected 50 cores, got 40"]
    # It cleaned up after itself: the next scenario finds every card free.
    assert all(not use.shares for use in runner.ops.observer.snapshot([], {}).cards)
