"""The cluster a plan starts from: the raw objects the engine's snapshot is built of."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from dra_driver.api import DriverNames
from dra_driver.engine import Snapshot
from dra_driver.k8s.objects import Object


@dataclasses.dataclass(frozen=True)
class ClusterObjects:
    """Nodes, this driver's ResourceSlices, DeviceClasses, existing claims and GpuShareQuotas.

    A live cluster adds its pods on nodes and its PodDisruptionBudgets (for preemption).

    ``source`` says where they came from, for the report (``inventory qgpu-runbook``).
    """

    source: str
    nodes: tuple[Object, ...]
    slices: tuple[Object, ...]
    classes: tuple[Object, ...]
    claims: tuple[Object, ...] = ()
    quotas: tuple[Object, ...] = ()
    pods: tuple[Object, ...] = ()
    """Pods bound to a node: those a preempting pod of the plan may evict."""
    budgets: tuple[Object, ...] = ()
    """PodDisruptionBudgets, read with their status."""
    problems: tuple[str, ...] = ()
    """What could not be read (quotas an account may not list), for the report's warnings."""

    def with_classes(self, classes: Iterable[Object]) -> ClusterObjects:
        """Return a copy where ``classes`` replace the classes of the same name or are added.

        A workload file's DeviceClasses are what the cluster would have once it is applied.
        """
        merged = {str(c["metadata"]["name"]): c for c in self.classes}
        merged.update({str(c["metadata"]["name"]): c for c in classes})
        return dataclasses.replace(self, classes=tuple(merged.values()))

    def snapshot(self, names: DriverNames) -> Snapshot:
        """Build a fresh snapshot; each policy's plan changes its own."""
        return Snapshot.build(
            names, nodes=self.nodes, slices=self.slices, classes=self.classes, claims=self.claims
        )
