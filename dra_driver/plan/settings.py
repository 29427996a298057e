"""Settings of capacity planning (``gpushare-dra plan``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.nvml.inventory import BUILTIN_INVENTORIES
from dra_driver.settings import flag, kubeconfig_flag, output_flag


@dataclasses.dataclass(frozen=True)
class PlanSettings:
    """Capacity planning."""

    inventory: str | None = flag(
        None,
        "fake GPU inventory YAML to plan on, or a built-in one: " + ", ".join(BUILTIN_INVENTORIES),
    )
    kubeconfig: str | None = kubeconfig_flag(
        "plan on the live cluster of this kubeconfig instead (read only)"
    )
    workload: Path | None = flag(
        None,
        "required: multi-document YAML of Pods, Deployments, StatefulSets, ReplicaSets and "
        "Jobs with the ResourceClaimTemplates, ResourceClaims and DeviceClasses they use, and "
        "PodDisruptionBudgets; an online pod that fits nowhere is placed by evicting offline "
        "pods (PREEMPTS), which are then EVICTED from the plan",
    )
    policy: str = flag(
        "both", "placement at every level to plan with", choices=("binpack", "spread", "both")
    )
    output: str = output_flag()
    summary: bool = flag(
        False,
        "table: list only the pods some policy does not place (with why), and count the cards "
        "used instead of listing them; for workloads of thousands of pods",
    )
    preemption: bool = flag(
        True,
        "false: plan as the controller runs with --preemption=false (the chart's "
        "controller.preemption.enabled: false): an online pod that fits nowhere waits instead "
        "of evicting offline pods",
    )
    consumable_capacity: bool = flag(
        True,
        "false: plan the inventory as a cluster without DRAConsumableCapacity (Kubernetes "
        "1.34/1.35 as shipped): cards published whole-only, shared by GpuShareConfig "
        "cores/memory; with --kubeconfig the cluster's own slices say which it is",
    )
