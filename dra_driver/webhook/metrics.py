"""The webhook's Prometheus metrics."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

_PREFIX: Final = "gpushare_webhook"
_LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Anyone who reaches the port can send any kind: labels take only these, so the series stay few.
_KINDS: Final = frozenset({"ResourceClaim", "ResourceClaimTemplate", "Pod"})


class WebhookMetrics:
    """Reviews by operation, kind and result; their latency; certificate reloads."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            f"{_PREFIX}_requests",
            "Admission reviews by operation (validate, mutate), kind and result (allowed, "
            "denied, patched, malformed, unavailable, error)",
            ["operation", "kind", "result"],
            registry=registry,
        )
        self._seconds = Histogram(
            f"{_PREFIX}_request_duration_seconds",
            "Time from reading a review's body to its answer, by operation and kind",
            ["operation", "kind"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self._reloads = Counter(
            f"{_PREFIX}_certificate_reloads",
            "Serving certificate reloads after the files changed, by result (reloaded, failed)",
            ["result"],
            registry=registry,
        )

    def observe(self, operation: str, kind: str, result: str, seconds: float) -> None:
        """Count one answered review."""
        label = kind if kind in _KINDS else "other"
        self._requests.labels(operation, label, result).inc()
        self._seconds.labels(operation, label).observe(seconds)

    def certificate_reload(self, result: str) -> None:
        """Count one reload attempt."""
        self._reloads.labels(result).inc()
