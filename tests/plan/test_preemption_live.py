"""``plan --kubeconfig`` and preemption: the cluster's running offline pods and its budgets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from plan.builders import NAMES, Object, dump, serve_runbook, template

from dra_driver.cli.main import main

BATCH = ("batch-1", "batch-2")


def _offline_claim(name: str, pod: Object, share_id: str) -> Object:
    """Return an offline 40-core 6Gi claim allocated on node-1/gpu-0, reserved for ``pod``."""
    parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind}
    result = {"request": "gpu", "driver": NAMES.driver, "pool": "node-1", "device": "gpu-0"}
    result |= {"shareID": share_id, "consumedCapacity": {"cores": "40", "memory": "6Gi"}}
    config = {
        "source": "FromClaim",
        "requests": ["gpu"],
        "opaque": {"driver": NAMES.driver, "parameters": parameters | {"priority": "offline"}},
    }
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
    spec = template(name, cores="40", memory="6Gi")["spec"]["spec"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
        "status": {
            "allocation": {
                "devices": {"results": [result], "config": [config]},
                "nodeSelector": {"nodeSelectorTerms": [term]},
            },
            "reservedFor": [
                {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
            ],
        },
    }


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """Serve qgpu-runbook with two offline batch pods filling node-1's card (80 cores, 12Gi)."""
    with FakeApiServer() as running:
        serve_runbook(running)
        for index, name in enumerate(BATCH, start=1):
            pod = running.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default", "labels": {"app": "batch"}},
                    "spec": {
                        "nodeName": "node-1",
                        "containers": [{"name": "main", "image": "example"}],
                        "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
                    },
                }
            )
            share_id = f"7d3f1c2a-0000-4000-8000-00000000000{index}"
            running.create(_offline_claim(f"{name}-gpu", pod, share_id))
        running.reset_requests()
        yield running
        assert running.internal_errors == []


SERVING = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "serving"},
    "spec": {
        "nodeSelector": {"kubernetes.io/hostname": "node-1"},
        "containers": [{"name": "main", "image": "example"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "serving-share"}],
    },
}


def _plan(server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """Plan the online 60-core 8Gi pod on the server under binpack; return the JSON document."""
    (tmp_path / "work.yaml").write_text(
        dump(template("serving-share", cores="60", memory="8Gi"), SERVING)
    )
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    argv = ["plan", "--kubeconfig", str(kubeconfig), "--workload", str(tmp_path / "work.yaml")]
    assert main([*argv, "--policy", "binpack", "-o", "json"], environ={}) == 0
    return json.loads(capsys.readouterr().out)


def test_a_running_offline_pod_of_the_cluster_is_named_and_nothing_is_written(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The online pod would evict one of the cluster's batch pods; the plan only lists."""
    document = _plan(server, tmp_path, capsys)
    (serving,) = document["policies"][0]["pods"]
    assert (serving["outcome"], serving["node"]) == ("preempts", "node-1")
    (victim,) = serving["victims"]
    assert victim in {f"default/{name}" for name in BATCH}
    assert serving["reason"] == f"would evict {victim} on node-1"
    assert document["policies"][0]["summary"]["evicted"] == 0  # no pod of the file
    assert {verb for verb, _ in server.requests} == {"list"}
    assert server.get("pods", "default", victim.split("/")[1]) is not None


def test_a_budget_of_the_cluster_at_zero_blocks_the_eviction(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PodDisruptionBudget allowing no disruption: the online pod waits, naming it."""
    server.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "batch", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "batch"}}},
            "status": {"disruptionsAllowed": 0},
        }
    )
    (serving,) = _plan(server, tmp_path, capsys)["policies"][0]["pods"]
    assert (serving["outcome"], serving["victims"]) == ("pending", [])
    assert serving["reason"].endswith(
        "would fit after evicting offline pods, but PodDisruptionBudget default/batch allows no "
        "more disruptions"
    )


@pytest.mark.parametrize("code", [403, 404])
def test_budgets_that_cannot_be_listed_are_said_once_and_ignored(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    """403 or 404 on PodDisruptionBudgets: one warning, and the plan preempts without them."""
    server.faults.inject(verb="list", resource="poddisruptionbudgets", status=code)
    document = _plan(server, tmp_path, capsys)
    found = [p for p in document["problems"] if "poddisruptionbudgets" in p]
    assert len(found) == 1
    assert found[0].startswith(
        "cannot list poddisruptionbudgets.policy, planned preemptions ignore disruption budgets: "
        f"{code}"
    )
    assert document["policies"][0]["pods"][0]["outcome"] == "preempts"
