"""Settings of the simulation (``gpushare-dra simulate``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.nvml.inventory import BUILTIN_INVENTORIES
from dra_driver.settings import flag, output_flag

SCENARIO_NAMES = (
    "whole-card", "sharing", "placement", "isolation", "online-offline", "bad-input", "quota",
    "preemption",
)  # fmt: skip
DEFAULT_INVENTORY = "qgpu-runbook"


@dataclasses.dataclass(frozen=True)
class SimulateSettings:
    """Simulation on a fake cluster."""

    inventory: str = flag(
        DEFAULT_INVENTORY,
        "fake GPU inventory YAML, or a built-in one: "
        + ", ".join(BUILTIN_INVENTORIES)
        + " (the scenarios' expectations are written for qgpu-runbook)",
    )
    scenario: str | None = flag(
        None,
        "acceptance scenario to run, or all (the default unless --apply is given)",
        choices=(*SCENARIO_NAMES, "all"),
    )
    apply: Path | None = flag(
        None,
        "run your own manifests instead (Pods, Deployments, StatefulSets, ReplicaSets, Jobs, "
        "ResourceClaimTemplates, ResourceClaims, DeviceClasses) and report where they land",
    )
    policy: str | None = flag(
        None,
        "placement at every level for shares whose config sets none; default: the "
        "controller's (online spread, offline binpack, nodes binpack)",
        choices=("binpack", "spread"),
    )
    output: str = output_flag()
    kube_binaries: Path | None = flag(
        None,
        "run on a real control plane instead of the fake API server: a directory holding etcd, "
        "kube-apiserver, kube-controller-manager and kube-scheduler (plain or .gz), and "
        "klhollow for real kubelets (else they are emulated)",
    )
    consumable_capacity: bool = flag(
        True,
        "false: simulate an API server without DRAConsumableCapacity (Kubernetes 1.34 and "
        "1.35 as shipped): cards are published whole-only, and the manifests' capacity "
        "requests become GpuShareConfig cores and memory, which the controller shares by",
    )
