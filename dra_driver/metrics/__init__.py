"""Prometheus metrics and health/readiness probes shared by every component."""

from dra_driver.metrics.server import HealthCheck, ObservabilityServer

__all__ = ["HealthCheck", "ObservabilityServer"]
