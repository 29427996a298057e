"""The controller exports how many pods its gate holds and how long the oldest has waited."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from dra_driver.controller.metrics import GatedCollector
from dra_driver.k8s.timestamps import epoch_seconds

GATE = "gpushare.dra.dev/allocation"
NOW = epoch_seconds("2026-11-28T10:30:00Z")


def _pod(name: str, created: str, gates: list[str]) -> dict[str, Any]:
    """Return a pod created at ``created`` with ``gates``."""
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"schedulingGates": [{"name": g} for g in gates]},
    }


def _values(pods: list[dict[str, Any]]) -> dict[str, float]:
    """Scrape a registry holding only the collector; return sample name -> value."""
    registry = CollectorRegistry()
    registry.register(GatedCollector(lambda: pods, GATE, lambda: NOW))
    return {s.name: s.value for family in registry.collect() for s in family.samples}


def test_only_pods_behind_our_gate_count_and_the_oldest_sets_the_age() -> None:
    """Two of ours (20 and 5 minutes old) count; a foreign gate or none does not."""
    pods = [
        _pod("old", "2026-11-28T10:10:00Z", [GATE]),
        _pod("new", "2026-11-28T10:25:00Z", ["example.com/queue", GATE]),
        _pod("queued", "2026-11-28T09:00:00Z", ["example.com/queue"]),
        _pod("running", "2026-11-28T08:00:00Z", []),
    ]
    assert _values(pods) == {
        "gpushare_controller_gated_pods": 2.0,
        "gpushare_controller_oldest_gated_pod_seconds": 1200.0,
    }


def test_no_gated_pod_exports_zero() -> None:
    """With nothing gated the age is 0, so the alert's threshold is never crossed."""
    assert _values([_pod("running", "2026-11-28T08:00:00Z", [])]) == {
        "gpushare_controller_gated_pods": 0.0,
        "gpushare_controller_oldest_gated_pod_seconds": 0.0,
    }
