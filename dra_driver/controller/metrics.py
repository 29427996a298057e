"""The controller's Prometheus metrics.

Per-card gauges are computed at scrape time from the controller's current snapshot, so they
show exactly what the next allocation decision would see.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dra_driver.engine import Device, Snapshot
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.timestamps import epoch_seconds

_PREFIX: Final = "gpushare_controller"

_LATENCY_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ControllerMetrics:
    """Counters and histograms the allocation and release loops update."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.allocations = Counter(
            f"{_PREFIX}_allocations",
            "Pod allocation attempts by result: allocated, unplaceable, refused (the claim "
            "can never fit as written), quota (a GpuShareQuota of the namespace is full), "
            "collided (someone who had not seen our allocation "
            "wrote one for the same card: ours was cleared and decided again) or error (an "
            "API failure, retried)",
            ["result"],
            registry=registry,
        )
        self.decision_seconds = Histogram(
            f"{_PREFIX}_decision_seconds",
            "Time the engine took to choose a node and cards for one pod",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.allocation_latency_seconds = Histogram(
            f"{_PREFIX}_allocation_latency_seconds",
            "Time from pod creation until its claims were allocated and its gate removed",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.releases = Counter(
            f"{_PREFIX}_releases",
            "Claims whose allocation this controller cleared",
            registry=registry,
        )
        self.preemptions = Counter(
            f"{_PREFIX}_preemptions",
            "Preemptions by outcome: nominated (room held for an online pod, its victims "
            "evicted), blocked (it would fit, but only by breaking a PodDisruptionBudget), "
            "expired, pod_gone or incomplete (a nomination dropped before its pod was "
            "placed; incomplete: written on only some of its claims, planned again)",
            ["result"],
            registry=registry,
        )
        self.preemption_victims = Counter(
            f"{_PREFIX}_preemption_victims",
            "Offline pods evicted to make room for online ones",
            registry=registry,
        )
        self.is_leader = Gauge(
            f"{_PREFIX}_leader", "1 while this replica is the active leader", registry=registry
        )


class CardCollector(Collector):
    """Exports free and allocated capacity per card from the current snapshot."""

    def __init__(self, snapshot: Callable[[], Snapshot | None]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield one gauge family each for allocated and free capacity."""
        labels = ["node", "device", "capacity"]
        allocated = GaugeMetricFamily(
            f"{_PREFIX}_card_allocated",
            "Capacity allocated on a card (cores or bytes)",
            labels=labels,
        )
        free = GaugeMetricFamily(
            f"{_PREFIX}_card_free", "Capacity still free on a card (cores or bytes)", labels=labels
        )
        sharing = GaugeMetricFamily(
            f"{_PREFIX}_cards",
            "Cards by how the controller shares them: consumable-capacity (published "
            "shareable), config-sizes (published whole-only, shared by GpuShareConfig "
            "cores/memory) or whole (published whole-only, handed out whole)",
            labels=["sharing"],
        )
        snapshot = self._snapshot()
        try:
            if snapshot is not None:
                self._add(snapshot, allocated, free)
                counts = Tally(_sharing(device) for device in list(snapshot.by_id.values()))
                for mode in _SHARING_MODES:
                    sharing.add_metric([mode], counts[mode])
        except RuntimeError:
            # The allocating thread changed the snapshot mid-scrape; the next scrape is whole.
            return
        yield allocated
        yield free
        yield sharing

    @staticmethod
    def _add(snapshot: Snapshot, allocated: GaugeMetricFamily, free: GaugeMetricFamily) -> None:
        for device in list(snapshot.by_id.values()):
            available = snapshot.state.free(device.id, device.capacities)
            whole = device.id in snapshot.state.exclusive
            for name, capacity in device.capacities.items():
                left = 0.0 if whole else float(available[name])
                label_values = [device.node, device.name, name]
                free.add_metric(label_values, left)
                allocated.add_metric(label_values, float(capacity.value) - left)


_SHARING_MODES: Final = ("consumable-capacity", "config-sizes", "whole")


def _sharing(device: Device) -> str:
    if device.shareable:
        return _SHARING_MODES[0]
    return _SHARING_MODES[1] if device.plain else _SHARING_MODES[2]


class GatedCollector(Collector):
    """Exports how many pods wait behind this driver's scheduling gate, and the oldest's age.

    A pod the controller cannot place keeps the gate; one gated for long is a card shortage,
    a quota, or a claim nothing can satisfy, which the alerts report.
    """

    def __init__(
        self, pods: Callable[[], list[Object]], gate: str, clock: Callable[[], float]
    ) -> None:
        self._pods, self._gate, self._clock = pods, gate, clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the count and the oldest age, from the controller's pod cache."""
        now = self._clock()
        created = [
            epoch_seconds(str(pod["metadata"]["creationTimestamp"]))
            for pod in self._pods()
            if objects.has_scheduling_gate(pod, self._gate)
            and objects.metadata(pod).get("creationTimestamp")
        ]
        yield GaugeMetricFamily(
            f"{_PREFIX}_gated_pods",
            "Pods still held by this driver's scheduling gate",
            len(created),
        )
        yield GaugeMetricFamily(
            f"{_PREFIX}_oldest_gated_pod_seconds",
            "Seconds since the oldest pod still held by this driver's gate was created; 0: none",
            max((max(0.0, now - c) for c in created), default=0.0),
        )
