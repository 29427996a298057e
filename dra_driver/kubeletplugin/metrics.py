"""Prometheus metrics of the kubelet plugin."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
            "1 if the API server keeps consumable-capacity fields, 0 if it strips them",
            registry=registry,
        )
