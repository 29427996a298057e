"""``gpushare-dra simulate --kube-binaries``: the eight scenarios on a real plane and kubelets.

Each run is a fresh process, as a user starts it, on ``../shared/k8s/bin`` (or the directory
``GPUSHARE_KUBE_BINARIES`` names): real etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and one real kubelet per node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import realkube
from gpushare_simulator.harness.kubebin import CONTROLLER_MANAGER, KUBELET, SCHEDULER
from gpushare_simulator.settings import SCENARIO_NAMES
from simulate.kit import simulation_dirs

pytestmark = pytest.mark.realk8s


def _simulate(cwd: Path, *flags: str) -> tuple[dict[str, Any], str]:
    """Run simulate with ``flags`` on the real binaries; return its JSON report and stderr."""
    source = realkube.binaries(CONTROLLER_MANAGER, SCHEDULER, KUBELET).source
    environ = {k: v for k, v in os.environ.items() if k not in ("LOG_LEVEL", "LOG_FORMAT")}
    before = simulation_dirs()
    command = [sys.executable, "-m", "dra_driver", "simulate", "--kube-binaries", str(source)]
    result = subprocess.run(
        [*command, "-o", "json", *flags],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-4000:]
    assert simulation_dirs() - before == set()
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["kubernetes"] == f"a real control plane from {source} with real kubelets"
    return report, result.stderr


def test_every_scenario_passes_on_a_real_plane_with_real_kubelets(tmp_path: Path) -> None:
    """--kube-binaries: all eight scenarios pass, the report names the plane, nothing is left."""
    report, stderr = _simulate(tmp_path)
    assert report["passed"] is True
    assert [s["name"] for s in report["scenarios"]] == list(SCENARIO_NAMES)
    assert all(s["passed"] for s in report["scenarios"])
    assert "starting a real control plane" in stderr
    # The online-offline scenario's CUDA work ran against the shares the real kubelet prepared.
    (online_offline,) = [s for s in report["scenarios"] if s["name"] == "online-offline"]
    cuda = [task for step in online_offline["steps"] for task in step["cuda"]]
    assert {task["pod"] for task in cuda} >= {"batch-0"}


def test_without_consumable_capacity_the_scenarios_pass_on_a_1_35_style_plane(
    tmp_path: Path,
) -> None:
    """--no-consumable-capacity with --kube-binaries: the gate is off on the real plane too."""
    report, _ = _simulate(tmp_path, "--no-consumable-capacity")
    assert report["inventory"].endswith(
        "without consumable capacity: the examples' capacity requests moved into GpuShareConfig "
        "cores/memory"
    )
    assert report["passed"] is True
    assert len(report["scenarios"]) == len(SCENARIO_NAMES)
