"""Prometheus metrics of the kubelet plugin."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from dra_driver.kubeletplugin.monitor import ClaimActivity


class CallMetrics:
    """Count and time of one kind of kubelet call, by result ("success" or "error")."""

    def __init__(self, registry: CollectorRegistry, verb: str) -> None:
        self._total = Counter(
            f"gpushare_{verb}_claims", f"claims of {verb} calls by result", ["result"],
            registry=registry,
        )  # fmt: skip
        self._seconds = Histogram(
            f"gpushare_{verb}_claim_duration_seconds", f"time to {verb} a claim", ["result"],
            registry=registry,
        )  # fmt: skip
        # Series exist at zero before the first call, so dashboards and alerts see them.
        for result in ("success", "error"):
            self._total.labels(result)

    def record(self, *, error: bool, seconds: float) -> None:
        """Count one claim of a call."""
        result = "error" if error else "success"
        self._total.labels(result).inc()
        self._seconds.labels(result).observe(seconds)


class PluginMetrics:
    """Prepare/unprepare counts and latency, prepared claims, cards by health."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.prepare = CallMetrics(registry, "prepare")
        self.unprepare = CallMetrics(registry, "unprepare")
        self.prepared_claims = Gauge(
            "gpushare_prepared_claims", "claims prepared on this node", registry=registry
        )
        self.cards = Gauge(
            "gpushare_cards", "cards on this node by health", ["health"], registry=registry
        )
        self.consumable_capacity = Gauge(
            "gpushare_consumable_capacity_supported",
            "1 if the API server keeps consumable-capacity fields (cards published shareable), "
            "0 if it strips them (cards published as plain devices), NaN until a card is published",
            registry=registry,
        )
        # Not 0: a node with no card to publish never learns, and 0 would raise the alert.
        self.consumable_capacity.set(math.nan)

    def set_consumable_capacity(self, supported: bool) -> None:
        """Record what the slice publisher learnt of the API server."""
        self.consumable_capacity.set(1 if supported else 0)


SHARE_LABELS: Final = ("node", "namespace", "pod", "claim", "uuid", "priority", "isolation")
REFUSAL_REASONS: Final = ("version", "magic", "size", "malformed", "unreadable")


class ShareCollector(Collector):
    """Per-share use of each card, from the node monitor's last period.

    Series come from the claims prepared now, so a claim's go with its unprepare: the label
    sets stay bounded by what runs on the node. ``namespace`` and ``pod`` are the claim's (the
    chart's ServiceMonitor honours them, as for kube-state-metrics); ``node`` says where.
    """

    def __init__(
        self,
        node: str,
        usage: Callable[[], Iterable[ClaimActivity]],
        refused: Callable[[], Mapping[str, int]],
    ) -> None:
        self._node, self._usage, self._refused = node, usage, refused

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the share gauges and the count of region files left alone."""
        families = {
            name: GaugeMetricFamily(f"gpushare_share_{name}", text, labels=SHARE_LABELS)
            for name, text in (
                ("memory_used_bytes", "memory the share's processes use on the card"),
                ("memory_limit_bytes", "memory the share may use on the card"),
                ("sm_utilization_percent", "SM utilisation of the share's processes"),
                ("suspended", "1 while the share's kernel launches are held for online work"),
            )
        }
        for use in self._usage():
            info, ref = use.claim.info, use.claim.ref
            labels = [
                self._node, ref.namespace, ",".join(info.pods), ref.name, use.uuid,
                str(info.priority), str(info.isolation),
            ]  # fmt: skip
            families["memory_used_bytes"].add_metric(labels, use.memory_used)
            families["memory_limit_bytes"].add_metric(labels, use.memory_limit)
            families["sm_utilization_percent"].add_metric(labels, use.sm_util)
            families["suspended"].add_metric(labels, 1 if use.suspended else 0)
        yield from families.values()
        refused = GaugeMetricFamily(
            "gpushare_hami_regions_refused",
            "HAMi-core region files the node monitor leaves alone (never written), by reason",
            labels=["reason"],
        )
        counts = self._refused()
        for reason in (*REFUSAL_REASONS, *sorted(set(counts) - set(REFUSAL_REASONS))):
            refused.add_metric([reason], counts.get(reason, 0))
        yield refused
