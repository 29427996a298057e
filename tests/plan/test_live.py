"""``plan --kubeconfig``: a live cluster (the fake API server) is read, counted, never written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from plan.builders import EXAMPLE, NAMES, serve_runbook

from dra_driver.cli.main import main

# What someone else's pod already holds on node-2's first card: 12 of its 15 GiB.
EXISTING_CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "running", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": NAMES.default_device_class,
                        "capacity": {"requests": {"cores": "60", "memory": "12Gi"}},
                    },
                }
            ]
        }
    },
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": NAMES.driver,
                        "pool": "node-2",
                        "device": "gpu-0",
                        "shareID": "7d3f1c2a-0000-4000-8000-000000000001",
                        "consumedCapacity": {"cores": "60", "memory": "12Gi"},
                    }
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["node-2"]}
                        ]
                    }
                ]
            },
            "allocationTimestamp": "2026-01-01T00:00:00Z",
        }
    },
}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """Run a fake API server holding the qgpu-runbook cluster, its slices and classes."""
    with FakeApiServer() as running:
        serve_runbook(running)
        running.reset_requests()
        yield running
        assert running.internal_errors == []


def _plan_json(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    argv = ["plan", "--kubeconfig", str(kubeconfig), "--workload", str(EXAMPLE), "-o", "json"]
    assert main([*argv, "--policy", "binpack"], environ={}) == 0
    return json.loads(capsys.readouterr().out)


def test_live_plan_counts_claims_already_allocated_and_only_reads(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With 12Gi taken on node-2 gpu-0, binpack puts both inference pods on gpu-1 instead."""
    server.create(EXISTING_CLAIM)
    document = _plan_json(server.write_kubeconfig(tmp_path / "kubeconfig"), capsys)
    assert document["cluster"] == f"cluster {server.url}"
    (binpack,) = document["policies"]
    pods = {p["name"]: p for p in binpack["pods"]}
    for name in ("infer-0", "infer-1"):
        assert pods[name]["node"] == "node-2"
        assert pods[name]["shares"][0]["pciBusID"] == "0000:00:09.0"
    card = next(c for c in binpack["cards"] if (c["node"], c["device"]) == ("node-2", "gpu-0"))
    assert card["memory"]["used"] == "12Gi"
    assert {verb for verb, _ in server.requests} == {"list"}
    assert server.get("resourceclaims", "default", "infer-0-gpu") is None


def test_live_plan_on_an_idle_cluster_matches_the_inventory_plan(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The slices the plugin publishes give the same placements as planning on the inventory."""
    live = _plan_json(server.write_kubeconfig(tmp_path / "kubeconfig"), capsys)
    argv = ["plan", "--inventory", "qgpu-runbook", "--workload", str(EXAMPLE), "-o", "json"]
    assert main([*argv, "--policy", "binpack"], environ={}) == 0
    offline = json.loads(capsys.readouterr().out)
    assert live["policies"] == offline["policies"]


def test_an_api_failure_exits_1_and_a_bad_kubeconfig_exits_2(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failing list is an API error (exit 1); an unreadable kubeconfig is bad input (exit 2)."""
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    server.faults.inject(verb="list", resource="resourceclaims", status=500)
    argv = ["plan", "--workload", str(EXAMPLE), "--kubeconfig"]
    assert main([*argv, str(kubeconfig)], environ={}) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpushare-dra plan: error: the API server failed: 500 ")
    assert main([*argv, str(tmp_path / "missing")], environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpushare-dra plan: error: cannot load Kubernetes credentials from ")
