#!/usr/bin/env python3
"""Benchmark the kubelet plugin over its real unix socket: prepare and unprepare latency, RSS.

``gpushare-dra kubelet-plugin`` runs as its own process (on a fake node of 8 H100 cards)
against the harness's API server, exactly as the kubelet would reach it: gRPC on
``dra.sock``. Every claim is a distinct allocated ResourceClaim (a quarter-card share) that the
plugin reads from the API server, checkpoints, and writes a CDI spec for, as in production.

Measured: NodePrepareResources and NodeUnprepareResources for 1 claim and batches of 8 and 32
(p50/p99/max per call), and the plugin's resident memory idle, with 1,000 claims prepared,
and after unpreparing them all.

    python hack/bench/prepare.py            # the full run (about a minute)
    python hack/bench/prepare.py --smoke    # tiny, for the test suite

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import grpc
from benchlib import emit, latency_summary, machine
from kubernetes import client

from dra_driver._proto.dra.v1 import api_pb2 as dra
from dra_driver._proto.dra.v1 import api_pb2_grpc as dra_grpc
from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.k8s import raw
from dra_driver.nvml.inventory import dump_inventory, parse_inventory
from dra_driver.testing.cluster import FakeCluster
from dra_driver.testing.processes import ComponentProcess, start_plugin

Object = dict[str, Any]

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NODE: Final = "bench-1"
CARDS: Final = 8
TARGETS: Final = {"prepare_1_p99_ms": 5.0, "prepare_32_p99_ms": 50.0, "idle_rss_mb": 80.0}
_INVENTORY: Final = f"""
generate:
  nodes: 1
  namePrefix: bench-
  cardsPerNode: {CARDS}
  card: {{productName: NVIDIA H100 80GB HBM3, memory: 80Gi, architecture: Hopper,
          cudaComputeCapability: "9.0", driverVersion: "550.54.15", numaNodes: 2}}
"""


def _allocated_claim(resource: client.ResourceV1Api, index: int) -> dra.Claim:
    """Create one allocated quarter-card claim on card ``index % 8``; return its reference."""
    name = f"bench-{index}"
    share = {"cores": "25", "memory": "20Gi"}
    created = raw.call(
        resource.create_namespaced_resource_claim,
        "default",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": NAMES.driver,
                                "capacity": {"requests": share},
                            },
                        }
                    ]
                }
            },
        },
    )
    result = {
        "request": "gpu",
        "driver": NAMES.driver,
        "pool": NODE,
        "device": f"gpu-{index % CARDS}",
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": share,
    }
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    allocation = {
        "devices": {"results": [result]},
        "nodeSelector": {"nodeSelectorTerms": [selector]},
        "allocationTimestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    stored = raw.call(
        resource.replace_namespaced_resource_claim_status,
        name,
        "default",
        {**created, "status": {"allocation": allocation}},
    )
    return dra.Claim(namespace="default", name=name, uid=stored["metadata"]["uid"])


def _timed(call: Callable[[], Any], errors: list[str], what: str) -> float:
    begin = time.perf_counter()
    response = call()
    elapsed = time.perf_counter() - begin
    errors.extend(f"{what} {uid}: {r.error}" for uid, r in response.claims.items() if r.error)
    return elapsed


def _batches(claims: Sequence[dra.Claim], size: int) -> list[Sequence[dra.Claim]]:
    return [claims[i : i + size] for i in range(0, len(claims) - size + 1, size)]


class Bench:
    """One plugin process, its gRPC stub, and the claims it is given."""

    def __init__(self, work_dir: Path) -> None:
        inventory = parse_inventory(_INVENTORY)
        inventory_file = work_dir / "inventory.yaml"
        inventory_file.write_text(dump_inventory(inventory))
        self.cluster = FakeCluster(inventory, work_dir)
        self.cluster.start()
        self.cluster.apply(default_device_classes(NAMES))
        self.resource = client.ResourceV1Api(self.cluster.api)
        self.plugin: ComponentProcess = start_plugin(self.cluster, NODE, inventory_file)
        self.plugin.wait_ready()
        socket = self.cluster.node_dirs(NODE).plugins / NAMES.driver / "dra.sock"
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = dra_grpc.DRAPluginStub(self.channel)
        self.errors: list[str] = []
        self._made = 0

    def claims(self, count: int) -> list[dra.Claim]:
        """Create ``count`` fresh allocated claims."""
        made = [_allocated_claim(self.resource, self._made + i) for i in range(count)]
        self._made += count
        return made

    def prepare(self, claims: Sequence[dra.Claim]) -> float:
        """Prepare the claims in one call; return its wall time."""
        request = dra.NodePrepareResourcesRequest(claims=list(claims))
        return _timed(
            lambda: self.stub.NodePrepareResources(request, timeout=60), self.errors, "prepare"
        )

    def unprepare(self, claims: Sequence[dra.Claim]) -> float:
        """Unprepare the claims in one call; return its wall time."""
        request = dra.NodeUnprepareResourcesRequest(claims=list(claims))
        return _timed(
            lambda: self.stub.NodeUnprepareResources(request, timeout=60), self.errors, "unprepare"
        )

    def close(self) -> int:
        """Stop the plugin and the cluster; return the plugin's exit status."""
        self.channel.close()
        status = self.plugin.terminate()
        self.cluster.stop()
        return status


def _megabytes(value: int) -> float:
    return round(value / 2**20, 1)


def run(work_dir: Path, *, rounds: int, resident: int) -> dict[str, Any]:
    """Measure every figure; ``rounds`` calls per batch size, ``resident`` claims for RSS."""
    bench = Bench(work_dir)
    try:
        time.sleep(1.0)  # let start-up work (slice publishing) settle before measuring memory
        idle_rss = bench.plugin.rss_bytes()
        latency: dict[str, Any] = {}
        for size in (1, 8, 32):
            claims = bench.claims(rounds * size)
            batches = _batches(claims, size)
            prepared = [bench.prepare(batch) for batch in batches]
            unprepared = [bench.unprepare(batch) for batch in batches]
            latency[f"prepare_{size}"] = latency_summary(prepared)
            latency[f"unprepare_{size}"] = latency_summary(unprepared)
            print(
                f"batch {size:>2}: prepare p50 {latency[f'prepare_{size}']['p50_ms']:.2f} ms "
                f"p99 {latency[f'prepare_{size}']['p99_ms']:.2f} ms; unprepare p50 "
                f"{latency[f'unprepare_{size}']['p50_ms']:.2f} ms "
                f"p99 {latency[f'unprepare_{size}']['p99_ms']:.2f} ms",
                flush=True,
            )
        held = bench.claims(resident)
        for batch in _batches(held, 32):
            bench.prepare(batch)
        prepared_rss = bench.plugin.rss_bytes()
        for batch in _batches(held, 32):
            bench.unprepare(batch)
        after_rss = bench.plugin.rss_bytes()
        specs_left = len(list(bench.cluster.node_dirs(NODE).cdi.glob("*.json")))
    finally:
        status = bench.close()
    memory = {
        "idle_rss_mb": _megabytes(idle_rss),
        f"rss_with_{resident}_prepared_mb": _megabytes(prepared_rss),
        "rss_after_unprepare_mb": _megabytes(after_rss),
    }
    print(f"plugin RSS: {memory}", flush=True)
    measured = {
        "prepare_1_p99_ms": latency["prepare_1"]["p99_ms"],
        "prepare_32_p99_ms": latency["prepare_32"]["p99_ms"],
        "idle_rss_mb": memory["idle_rss_mb"],
    }
    return {
        "benchmark": "prepare",
        "machine": machine(),
        "rounds": rounds,
        "resident_claims": resident,
        "latency": latency,
        "memory": memory,
        "errors": bench.errors,
        "cdi_specs_left": specs_left,
        "plugin_exit_status": status,
        "targets": {
            name: {"limit": limit, "measured": measured[name], "pass": measured[name] <= limit}
            for name, limit in TARGETS.items()
        },
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="calls per batch size")
    parser.add_argument("--claims", type=int, default=1000, help="claims held for the RSS figure")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.claims = 3, 64
    # Unix socket paths must stay under 108 bytes, so not under a long temporary directory.
    work_dir = Path(tempfile.mkdtemp(prefix="gpb-", dir="/tmp"))
    try:
        emit(run(work_dir, rounds=args.rounds, resident=args.claims))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
