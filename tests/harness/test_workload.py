"""The synthetic workload of benchmarks and load runs: what it draws, and its end-state checks."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.endstate import controller_cards_taken, leftovers
from gpushare_simulator.harness.workload import (
    SHARES,
    PlannedPod,
    claim_spec,
    plan_wave,
)
from harness.apiserver.builders import SHARE_ID
from prometheus_client import CollectorRegistry, generate_latest

from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, DriverNames, decode_config
from dra_driver.api.classes import default_device_classes
from dra_driver.cdi import spec_file_name
from dra_driver.controller.metrics import CardCollector
from dra_driver.engine import Snapshot
from dra_driver.nvml.inventory import builtin_inventory
from dra_driver.plan.inventory import node_object, node_slices

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
CARD = 80 * 2**30
UID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"


def _exactly(spec: dict[str, Any]) -> dict[str, Any]:
    exactly: dict[str, Any] = spec["devices"]["requests"][0]["exactly"]
    return exactly


def _allocated_claim(node: str) -> dict[str, Any]:
    """Return a claim holding a quarter of gpu-0 on ``node``, with our finalizer."""
    result = {
        "request": "gpu",
        "driver": NAMES.driver,
        "pool": node,
        "device": "gpu-0",
        "shareID": SHARE_ID,
        "consumedCapacity": {"cores": "25", "memory": "20Gi"},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "c",
            "namespace": "default",
            "uid": UID,
            "finalizers": [NAMES.finalizer],
        },
        "spec": claim_spec(NAMES, SHARES[0], CARD),
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def test_claim_spec_asks_for_the_share_of_a_card() -> None:
    """A quarter asks for 25 cores and a quarter of the memory in MiB; a whole card for nothing."""
    quarter, half, whole = SHARES
    assert _exactly(claim_spec(NAMES, quarter, CARD))["capacity"] == {
        "requests": {"cores": "25", "memory": "20480Mi"}
    }
    assert _exactly(claim_spec(NAMES, half, CARD))["capacity"] == {
        "requests": {"cores": "50", "memory": "40960Mi"}
    }
    assert _exactly(claim_spec(NAMES, whole, CARD)) == {
        "deviceClassName": NAMES.default_device_class
    }


def test_plan_wave_shares_each_named_claim_among_its_pods() -> None:
    """Every pod is unique and names one claim source; each named claim has exactly k pods."""
    rng = random.Random(3)  # noqa: S311 - reproducible test data
    wave = plan_wave(NAMES, rng, "w", 30, CARD, shared_claims=2, pods_per_claim=4)
    assert len({pod.name for pod in wave.pods}) == len(wave.pods) == 30
    assert all((pod.template is None) != (pod.claim is None) for pod in wave.pods)
    users = Counter(pod.claim for pod in wave.pods if pod.claim)
    assert users == {"w-shared-0": 4, "w-shared-1": 4}
    assert [claim["metadata"]["name"] for claim in wave.claims] == ["w-shared-0", "w-shared-1"]
    assert {pod.template for pod in wave.pods if pod.template} <= {s.name for s in SHARES}


def test_a_claim_several_pods_share_asks_for_backend_none() -> None:
    """HAMi-core refuses a claim shared by pods, so the workload's shared claims only account."""
    wave = plan_wave(NAMES, random.Random(3), "w", 10, CARD, shared_claims=1, pods_per_claim=4)  # noqa: S311
    (config,) = wave.claims[0]["spec"]["devices"]["config"]
    assert config["opaque"]["parameters"]["backend"] == "none"
    assert decode_config(config["opaque"]["parameters"], NAMES).backend is Backend.NONE


def test_plan_wave_refuses_more_shared_pods_than_pods() -> None:
    """Asking for more pods on shared claims than pods in the wave is an error, not a surprise."""
    rng = random.Random(0)  # noqa: S311 - reproducible test data
    with pytest.raises(ValueError, match="3 claims x 4 pods exceed 10 pods"):
        plan_wave(NAMES, rng, "w", 10, CARD, shared_claims=3, pods_per_claim=4)


def test_pod_manifest_carries_the_gate_only_when_given() -> None:
    """The webhook's gate is added on request; the claim entry is what the container uses."""
    pod = PlannedPod("p", claim="shared")
    gated = pod.manifest(NAMES.scheduling_gate)["spec"]
    assert gated["schedulingGates"] == [{"name": NAMES.scheduling_gate}]
    assert gated["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "shared"}]
    assert gated["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert "schedulingGates" not in pod.manifest(None)["spec"]


def test_leftovers_names_allocations_finalizers_specs_and_checkpoint_entries(
    work_dir: Path,
) -> None:
    """A fresh cluster is clean; an allocated claim, a CDI spec and a checkpoint entry are not."""
    inventory = builtin_inventory("one-node-one-card")
    with FakeCluster(inventory, work_dir, kubelets=False) as cluster:
        assert leftovers(cluster, NAMES) == []
        node = inventory.nodes[0].name
        cluster.server.create(_allocated_claim(node))
        dirs = cluster.node_dirs(node)
        plugin_dir = dirs.plugins / NAMES.driver
        for directory in (dirs.cdi, plugin_dir):
            directory.mkdir(parents=True)
        spec = spec_file_name(NAMES, UID)
        (dirs.cdi / spec).write_text("{}")
        entry = {"uid": UID, "state": "PrepareCompleted", "spec_file": spec}
        (checkpoint := plugin_dir / "checkpoint").mkdir()
        (checkpoint / f"{UID}.json").write_text(json.dumps({"claims": [entry], "version": 2}))
        assert leftovers(cluster, NAMES) == [
            "claim default/c is still allocated",
            f"claim default/c still has the finalizer {NAMES.finalizer}",
            f"CDI spec {spec} on {node}",
            f"checkpoint entry {UID} on {node}",
        ]


def test_controller_cards_taken_reads_the_controllers_card_gauge(tmp_path: Path) -> None:
    """The controller's own card metrics name each card in use, and a node it does not know."""
    inventory = builtin_inventory("one-node-one-card")
    node = inventory.nodes[0]
    registry = CollectorRegistry()
    snapshot = Snapshot.build(
        NAMES,
        nodes=[node_object(node)],
        slices=node_slices(NAMES, node),
        classes=default_device_classes(NAMES),
        claims=[],
    )
    registry.register(CardCollector(lambda: snapshot))
    metrics = tmp_path / "metrics"
    metrics.write_bytes(generate_latest(registry))
    assert controller_cards_taken(metrics.as_uri(), 1) == []
    snapshot.update_claim(_allocated_claim(node.name))
    metrics.write_bytes(generate_latest(registry))
    assert controller_cards_taken(metrics.as_uri(), 2) == [
        f"card {node.name}/gpu-0: 25 cores, 2.14748e+10 memory taken",
        "the controller's metrics show 1 of 2 nodes' cards",
    ]
