"""Fixtures for the simulation's tests: one simulated cluster per module, real or fake."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from gpushare_simulator.harness.kubebin import KubeBinaries
from gpushare_simulator.simulate.runner import Runner
from gpushare_simulator.simulate.stack import Stack
from realkube import opt_in
from simulate.kit import NAMES, FullRun, simulation_dirs

from dra_driver.controller.settings import ControllerSettings
from dra_driver.nvml.inventory import builtin_inventory


@pytest.fixture(scope="module")
def kube_binaries() -> KubeBinaries | None:
    """Real control-plane binaries where GPUSHARE_KUBE_BINARIES names them; else the fake."""
    return opt_in()


@pytest.fixture(scope="module")
def runner(kube_binaries: KubeBinaries | None) -> Iterator[Runner]:
    """Yield a runner on the qgpu-runbook cluster with the real components, stopped after."""
    inventory = builtin_inventory("qgpu-runbook")
    settings = ControllerSettings(leader_elect=False)
    with Stack(NAMES, inventory, settings, binaries=kube_binaries) as stack:
        yield Runner(stack, NAMES, lambda _: None)


@pytest.fixture(scope="session")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> FullRun:
    """Run ``gpushare-dra simulate --scenario all`` as a fresh process, outside the checkout."""
    before = simulation_dirs()
    environ = {k: v for k, v in os.environ.items() if k not in ("LOG_LEVEL", "LOG_FORMAT")}
    result = subprocess.run(
        [sys.executable, "-m", "dra_driver", "simulate", "--scenario", "all"],
        cwd=tmp_path_factory.mktemp("elsewhere"),
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    leftovers = simulation_dirs() - before
    return FullRun(result.returncode, result.stdout, result.stderr, leftovers)
