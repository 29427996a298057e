"""Prometheus metrics of the kubelet plugin."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class PluginMetrics:
    """Prepare/unprepare counts and latency, prepared claims, cards by health."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._prepare_total = Counter(
            "gpushare_prepare_claims", "NodePrepareResources claims by result", ["result"],
            registry=registry,
        )  # fmt: skip
        self._prepare_seconds = Histogram(
            "gpushare_prepare_claim_duration_seconds", "time to prepare a claim", ["result"],
            registry=registry,
        )  # fmt: skip
        self._unprepare_total = Counter(
            "gpushare_unprepare_claims", "NodeUnprepareResources claims by result", ["result"],
            registry=registry,
        )  # fmt: skip
        self._unprepare_seconds = Histogram(
            "gpushare_unprepare_claim_duration_seconds", "time to unprepare a claim", ["result"],
            registry=registry,
        )  # fmt: skip
        self.prepared_claims = Gauge(
            "gpushare_prepared_claims", "claims prepared on this node", registry=registry
        )
        self.cards = Gauge(
            "gpushare_cards", "cards on this node by health", ["health"], registry=registry
        )
        self.consumable_capacity = Gauge(
            "gpushare_consumable_capacity_supported",
            "1 if the API server keeps consumable-capacity fields, 0 if it strips them",
            registry=registry,
        )
        # Series exist at zero before the first call, so dashboards and alerts see them.
        for result in ("success", "error"):
            self._prepare_total.labels(result)
            self._unprepare_total.labels(result)

    def prepared(self, *, error: bool, seconds: float) -> None:
        """Count one prepared claim."""
        result = "error" if error else "success"
        self._prepare_total.labels(result).inc()
        self._prepare_seconds.labels(result).observe(seconds)

    def unprepared(self, *, error: bool, seconds: float) -> None:
        """Count one unprepared claim."""
        result = "error" if error else "success"
        self._unprepare_total.labels(result).inc()
        self._unprepare_seconds.labels(result).observe(seconds)
