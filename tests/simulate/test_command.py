"""``gpushare-dra simulate`` as a command: exit status, report formats, --apply, cleanliness."""

from __future__ import annotations

import io
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpushare_simulator.settings import SimulateSettings
from gpushare_simulator.simulate import command
from gpushare_simulator.simulate import runner as runner_module
from gpushare_simulator.simulate.command import controller_settings, examples_dir
from gpushare_simulator.simulate.progress import Progress
from gpushare_simulator.simulate.runner import Runner
from gpushare_simulator.simulate.stack import Stack, StackError
from simulate.kit import NAMES, FullRun, simulation_dirs

from dra_driver.api import Placement

APPLY = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: half}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpushare.dra.dev,
                              capacity: {requests: {cores: "50", memory: 7Gi}}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: greedy}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpushare.dra.dev,
                              capacity: {requests: {cores: "150"}}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  replicas: 3
  template:
    spec:
      nodeSelector: {kubernetes.io/hostname: node-1}
      resourceClaims: [{name: gpu, resourceClaimTemplateName: half}]
      containers: [{name: app, image: app, resources: {claims: [{name: gpu}]}}]
"""


class Captured:
    """A simulate run in this process: exit status and what it printed."""

    def __init__(self, settings: SimulateSettings, **options: Any) -> None:
        self.stdout, self.stderr = io.StringIO(), io.StringIO()
        self.status = command.run(NAMES, settings, self.stdout, self.stderr, **options)

    @property
    def out(self) -> str:
        return self.stdout.getvalue()

    @property
    def err(self) -> str:
        return self.stderr.getvalue()


@pytest.fixture
def clean_process() -> Iterator[None]:
    """Fail the test if it leaves a thread running or a simulation directory on disk."""
    threads, directories = set(threading.enumerate()), simulation_dirs()
    yield
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [t.name for t in set(threading.enumerate()) - threads] == []
    assert simulation_dirs() - directories == set()


def test_all_scenarios_pass_as_a_fresh_process_and_leave_nothing(full_run: FullRun) -> None:
    """--scenario all exits 0 with eight PASS lines and removes its temporary directory."""
    assert full_run.returncode == 0, full_run.stderr
    assert "RESULT PASS: 8 of 8 scenarios passed" in full_run.stdout
    names = ("whole-card", "sharing", "placement", "isolation", "online-offline", "bad-input")
    for name in (*names, "quota", "preemption"):
        assert f"PASS  {name}: all " in full_run.stdout
    assert full_run.leftovers == set()


def test_progress_goes_to_stderr_as_plain_lines_off_a_terminal(full_run: FullRun) -> None:
    """Off a terminal every step is one line on stderr; no component logs at the default level."""
    lines = full_run.stderr.splitlines()
    assert lines[0].endswith("] starting the fake API server with 2 nodes")
    assert any(line.endswith("] placement: 2/3 placement: spread: the replicas on different "
                             "cards of node-2") for line in lines)  # fmt: skip
    assert all(line.startswith("[") and "\r" not in line for line in lines)
    assert "starting" not in full_run.stdout


def test_one_scenario_in_process_stops_every_thread(clean_process: None) -> None:
    """A run leaves no thread of the API server, kubelets, plugins, webhook or controller."""
    run = Captured(SimulateSettings(scenario="sharing"))
    assert run.status == 0, run.err
    assert "PASS  sharing: all 3 expectations held" in run.out
    assert "whole-card" not in run.out


def test_without_consumable_capacity_the_report_says_so_and_passes(clean_process: None) -> None:
    """--no-consumable-capacity: the sharing scenario passes and the report names the mode."""
    run = Captured(SimulateSettings(scenario="sharing", consumable_capacity=False, output="json"))
    assert run.status == 0, run.err
    report = json.loads(run.out)
    assert report["inventory"].endswith(
        "without consumable capacity: the examples' capacity requests moved into GpuShareConfig "
        "cores/memory"
    )
    assert report["passed"] is True


def test_json_report_has_the_documented_keys(clean_process: None) -> None:
    """-o json is one document with the keys render.py documents, refusals included."""
    run = Captured(SimulateSettings(scenario="bad-input", output="json"))
    assert run.status == 0, run.err
    report = json.loads(run.out)
    assert list(report) == [
        "kind",
        "driver",
        "inventory",
        "kubernetes",
        "policy",
        "passed",
        "seconds",
        "scenarios",
    ]
    assert (report["kind"], report["passed"]) == ("Simulation", True)
    assert report["kubernetes"] == "the fake API server"
    assert report["policy"] == {"online": "spread", "offline": "binpack", "node": "binpack"}
    (scenario,) = report["scenarios"]
    assert list(scenario) == ["name", "title", "manifest", "passed", "seconds", "steps"]
    assert scenario["manifest"] == "deploy/examples/bad-input.yaml"
    first, second = scenario["steps"]
    assert list(first) == [
        "title", "actions", "pods", "refused", "cards", "cuda", "quotas", "expectations",
    ]  # fmt: skip
    (pod,) = first["pods"]
    assert list(pod) == [
        "namespace", "name", "owner", "phase", "node", "reason", "event", "shares", "env",
    ]  # fmt: skip
    assert list(pod["shares"][0]) == [
        "claim", "request", "node", "device", "uuid", "pciBusID",
        "cores", "memory", "isolation", "priority",
    ]  # fmt: skip
    assert pod["env"]["server"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5120m"
    assert pod["env"]["server"]["GPUSHARE_CORES_0"] == "30"
    assert first["cards"][0] == {
        "node": "node-1", "device": "gpu-0", "uuid": "GPU-26975e32-62e5-543b-ac29-e97c231c6291",
        "pciBusID": "0000:00:08.0", "shares": 1, "whole": False,
        "cores": {"used": "30", "total": "100"}, "memory": {"used": "5Gi", "total": "15Gi"},
    }  # fmt: skip
    assert second["refused"][0]["object"] == "ResourceClaimTemplate/too-much-memory"
    assert all(e["passed"] and e["failures"] == [] for e in second["expectations"])
    assert len(second["expectations"]) == 5


def test_json_report_shows_the_quota_and_the_event_of_the_pod_it_holds(
    clean_process: None,
) -> None:
    """-o json: the quota's hard and written status, and QuotaExceeded as the pod's event."""
    run = Captured(SimulateSettings(scenario="quota", output="json"))
    assert run.status == 0, run.err
    (scenario,) = json.loads(run.out)["scenarios"]
    over = scenario["steps"][1]
    assert over["quotas"] == [
        {
            "namespace": "quota",
            "name": "gpu",
            "hard": {"cores": "100", "memory": "10Gi"},
            "used": {"cores": "100", "memory": "10Gi", "cards": "0"},
            "exceeded": "False",
        }
    ]
    events = {pod["name"]: (pod["phase"], pod["event"]) for pod in over["pods"]}
    assert events == {
        "infer-a-0": ("Running", None),
        "infer-b-0": ("Running", None),
        "infer-c-0": ("Pending", "QuotaExceeded"),
    }


def test_json_report_shows_what_the_cuda_work_saw(clean_process: None) -> None:
    """-o json lists each simulated CUDA process per step: held or not, limits, timed changes."""
    run = Captured(SimulateSettings(scenario="online-offline", output="json"))
    assert run.status == 0, run.err
    (scenario,) = json.loads(run.out)["scenarios"]
    busy = {task["pod"]: task for task in scenario["steps"][2]["cuda"]}
    assert list(busy["batch-0"]) == [
        "pod", "busy", "held", "smLimit", "smLimitPercent", "smUtilization", "memoryUsed",
        "changes",
    ]  # fmt: skip
    assert busy["batch-0"]["held"] is True
    assert busy["batch-0"]["memoryUsed"] == "4Gi"
    assert busy["batch-0"]["smLimitPercent"] == 40
    held = [c for c in busy["batch-0"]["changes"] if c["what"] == "held"]
    assert 0 <= held[0]["after"] <= 1.5
    assert (busy["infer-0"]["held"], busy["infer-0"]["smLimit"]) == (False, False)


def test_apply_reports_a_users_manifest(tmp_path: Path, clean_process: None) -> None:
    """--apply places a StatefulSet's pods, shows a refusal and who waits, and exits 0."""
    manifest = tmp_path / "mine.yaml"
    manifest.write_text(APPLY)
    run = Captured(SimulateSettings(apply=manifest))
    assert run.status == 0, run.err
    assert f"== apply: {manifest} " in run.out
    lines = run.out.splitlines()
    assert any(
        line.startswith("web-0  Running  node-1  GPU-26975e32 0000:00:08.0  50") for line in lines
    )
    assert any(line.startswith("web-1  Running  node-1") for line in lines)
    assert any(line.startswith("web-2  Pending  -") for line in lines)
    assert "no card with 50 cores, 7Gi memory free" in run.out.replace("\n      ", " ")
    assert "REFUSED ResourceClaimTemplate/greedy" in run.out
    assert "node-1/gpu-0 0000:00:08.0  GPU-26975e32  2       100/100  14Gi/15Gi" in run.out
    assert "RESULT" not in run.out


def test_apply_without_consumable_capacity_applies_the_file_as_written(
    tmp_path: Path, clean_process: None
) -> None:
    """A user's capacity request is refused there, as on 1.35, never silently rewritten."""
    manifest = tmp_path / "mine.yaml"
    manifest.write_text(APPLY)
    run = Captured(SimulateSettings(apply=manifest, consumable_capacity=False))
    assert run.status == 0, run.err
    header, report = run.out.replace("\n  ", " "), run.out.replace("\n      ", " ")
    assert "applied as written (capacity requests are refused, as on 1.34/1.35)" in header
    assert "REFUSED ResourceClaimTemplate/half" in run.out
    assert "this cluster's API server drops capacity requests" in report
    assert not any(line.startswith("web-0  Running") for line in run.out.splitlines())


def test_a_step_that_changes_no_pod_or_card_does_not_repeat_their_tables(
    clean_process: None,
) -> None:
    """isolation's CUDA steps change only the CUDA table: pods and cards are printed once."""
    run = Captured(SimulateSettings(scenario="isolation"))
    assert run.status == 0, run.err
    assert sum(line.startswith("POD ") for line in run.out.splitlines()) == 1
    for step in (2, 3, 4):
        assert f"pods and cards as after step {step - 1}" in run.out
    assert sum(line.startswith("CUDA WORK") for line in run.out.splitlines()) == 3


PLAIN_NUMBERS = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpushare.dra.dev
        capacity: {requests: {cores: 30, memory: 1073741824}}
---
apiVersion: v1
kind: Pod
metadata: {name: p4}
spec:
  resourceClaims: [{name: gpu, resourceClaimName: c}]
  containers:
  - name: c
    image: x
    resources: {claims: [{name: gpu}], limits: {cpu: 1, memory: 1073741824}, requests: {cpu: 0.5}}
"""


def test_apply_takes_plain_numbers_where_kubernetes_takes_quantities(
    tmp_path: Path, clean_process: None
) -> None:
    """cpu: 1, memory: 1073741824 and cores: 30 are quantities, as kubectl sends them."""
    manifest = tmp_path / "numbers.yaml"
    manifest.write_text(PLAIN_NUMBERS)
    run = Captured(SimulateSettings(apply=manifest))
    assert run.status == 0, run.err
    assert any(
        line.split()[:6] == ["p4", "Running", "node-1", "GPU-26975e32", "0000:00:08.0", "30"]
        for line in run.out.splitlines()
    )
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=1024m" in run.out


def test_unusable_input_exits_2_before_starting(tmp_path: Path, clean_process: None) -> None:
    """Bad inventory, manifest, flag pair or --kube-binaries directory: exit 2, no start."""
    partial = tmp_path / "envtest"  # what envtest ships: no controller manager, no scheduler
    partial.mkdir()
    for name in ("etcd", "kube-apiserver"):
        (partial / name).write_text("#!/bin/sh\nexit 1\n")
        (partial / name).chmod(0o755)
    for settings, error in (
        (SimulateSettings(inventory="nowhere"), "nowhere"),
        (SimulateSettings(apply=tmp_path / "gone.yaml"), "gone.yaml: cannot read"),
        (SimulateSettings(apply=tmp_path, scenario="sharing"), "give --scenario or --apply"),
        (
            SimulateSettings(kube_binaries=tmp_path / "none"),
            "none: not a directory of Kubernetes binaries",
        ),
        (
            SimulateSettings(kube_binaries=partial),
            "has no kube-controller-manager (nor kube-controller-manager.gz); "
            "it holds: etcd, kube-apiserver",
        ),
    ):
        run = Captured(settings)
        assert run.status == 2
        assert run.err.startswith("gpushare-dra simulate: error: ")
        assert error in run.err
        assert run.out == ""


def test_a_failed_expectation_exits_1_and_explains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_process: None
) -> None:
    """A manifest that no longer does what the scenario expects: FAIL with what happened."""
    monkeypatch.setattr(runner_module, "CHECK_SECONDS", 0.2)
    examples = tmp_path / "examples"
    shutil.copytree(examples_dir(), examples)
    sharing = examples / "sharing.yaml"
    sharing.write_text(sharing.read_text().replace('cores: "40"', 'cores: "50"'))
    run = Captured(SimulateSettings(scenario="sharing"), examples=examples)
    assert run.status == 1
    assert "FAIL  sharing: 1 of 3 expectations failed" in run.out
    assert "- step 1: pod infer-a-0: expected CUDA_DEVICE_SM_LIMIT_0=40, got" in run.out
    assert "- step 1: pod infer-a-0: expected 40 cores, got 50" in run.out
    assert "RESULT FAIL: 0 of 1 scenarios passed" in run.out


def test_ctrl_c_stops_everything_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, clean_process: None
) -> None:
    """KeyboardInterrupt mid-run still stops every component and removes the directory."""

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Runner, "run", interrupted)
    run = Captured(SimulateSettings(scenario="sharing"))
    assert run.status == 130
    assert "interrupted; everything it started is stopped" in run.err
    assert run.out == ""


def test_a_cluster_that_cannot_start_exits_1(
    monkeypatch: pytest.MonkeyPatch, clean_process: None
) -> None:
    """A start-up failure is reported as the simulated cluster failing, exit status 1."""

    def broken(self: Stack, deadline: float) -> None:
        raise StackError("timed out waiting for the controller")

    monkeypatch.setattr(Stack, "_start", broken)
    run = Captured(SimulateSettings(scenario="sharing"))
    assert run.status == 1
    assert "the simulated cluster failed: timed out waiting for the controller" in run.err


def test_policy_sets_every_level_of_the_controller() -> None:
    """--policy spread sets online, offline and node placement; none keeps the defaults."""
    spread = controller_settings(SimulateSettings(policy="spread"))
    assert (spread.gpu_placement_online, spread.gpu_placement_offline, spread.node_placement) == (
        Placement.SPREAD, Placement.SPREAD, Placement.SPREAD,
    )  # fmt: skip
    default = controller_settings(SimulateSettings())
    assert (default.gpu_placement_online, default.node_placement, default.leader_elect) == (
        Placement.SPREAD, Placement.BINPACK, False,
    )  # fmt: skip


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_rewrites_one_line_on_a_terminal() -> None:
    """On a terminal each update replaces the line, and closing clears it."""
    stream = _Terminal()
    progress = Progress(stream)
    progress("first")
    progress("second")
    progress.close()
    written = stream.getvalue()
    assert written.count("\r\033[K") == 3
    assert "\n" not in written
    assert written.endswith("] second\r\033[K")
