#!/usr/bin/env python3
"""Benchmark the kubelet plugin over its real unix socket: prepare and unprepare latency, RSS.

``gpushare-dra kubelet-plugin`` runs as its own process (on a fake node of 8 H100 cards)
against the harness's API server, exactly as the kubelet would reach it: gRPC on
``dra.sock``. Every claim is a distinct allocated ResourceClaim (a quarter-card share) that the
plugin reads from the API server, checkpoints, and writes a CDI spec for, as in production.

Measured: NodePrepareResources and NodeUnprepareResources for 1 claim and batches of 8 and 32
(p50/p99/max per call) with 64 claims already prepared on the node (a busy 8-card node; each
timed batch is unprepared right after, so that number holds), then again with 1,000 prepared:
the checkpoint keeps one file per call, so a call should cost the same on both. And the
plugin's resident memory idle, with 1,000 claims prepared, and after unpreparing them all.

The same calls are then measured on the plugin alone: its gRPC server and claim state built in
this process, on its own real unix socket and directories, with the claims read from memory.
The first figures include the claim reads served by the harness's API server (Python, in this
process, on the same cores); the second are what the plugin itself costs. Last, the claim state
alone (no gRPC, no API): the checkpoint file, CDI specs and directories a prepare writes,
with 64 and with 1,000 claims on the node.

    python hack/bench/prepare.py            # the full run (about two minutes)
    python hack/bench/prepare.py --under /dev/shm   # the same on tmpfs: no disk in the figures

The CDI specs of the in-process phases go to ``--cdi-under`` (``/dev/shm`` where it exists): on
a node ``/var/run/cdi`` is on ``/run``, a tmpfs, and only the plugin's directory is on disk.
    python hack/bench/prepare.py --smoke    # tiny, for the test suite

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import abc
import argparse
import datetime
import gc
import io
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import grpc
from benchlib import emit, latency_summary, machine
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.processes import ComponentProcess, start_plugin
from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver._proto.dra.v1 import api_pb2 as dra
from dra_driver._proto.dra.v1 import api_pb2_grpc as dra_grpc
from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.k8s import raw
from dra_driver.k8s.heap import freeze_startup_heap
from dra_driver.k8s.objects import Object
from dra_driver.kubeletplugin.entries import ClaimRef
from dra_driver.kubeletplugin.grpcserver import PluginServer, socket_paths
from dra_driver.kubeletplugin.metrics import PluginMetrics
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.kubeletplugin.state import ClaimPreparer
from dra_driver.logging import LogFormat, configure_logging
from dra_driver.nvml.inventory import Card, dump_inventory, parse_inventory

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NODE: Final = "bench-1"
CARDS: Final = 8
_TMPFS: Final = "/dev/shm"  # noqa: S108 - a parent for mkdtemp, which makes it private
TARGETS: Final = {
    "prepare_1_p99_ms": 5.0,
    "prepare_32_p99_ms": 50.0,
    "idle_rss_mb": 80.0,
    "plugin_alone_prepare_1_p99_ms": 5.0,
    "plugin_alone_prepare_32_p99_ms": 50.0,
    # With the resident claims (1,000) on the node: a call must not grow with them.
    "claim_state_prepare_1_p99_ms": 5.0,
    "claim_state_prepare_32_p99_ms": 50.0,
}
_INVENTORY: Final = f"""
generate:
  nodes: 1
  namePrefix: bench-
  cardsPerNode: {CARDS}
  card: {{productName: NVIDIA H100 80GB HBM3, memory: 80Gi, architecture: Hopper,
          cudaComputeCapability: "9.0", driverVersion: "550.54.15", numaNodes: 2}}
"""


def _claim_object(index: int) -> Object:
    """Return an allocated quarter-card claim on card ``index % 8``, as the API stores it."""
    share = {"cores": "25", "memory": "20Gi"}
    result = {
        "request": "gpu",
        "driver": NAMES.driver,
        "pool": NODE,
        "device": f"gpu-{index % CARDS}",
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": share,
    }
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"bench-{index}", "namespace": "default", "uid": str(uuid.uuid4())},
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
        "status": {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [selector]},
                "allocationTimestamp": datetime.datetime.now(datetime.UTC).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                ),
            }
        },
    }


def _reference(claim: Object) -> dra.Claim:
    meta = claim["metadata"]
    return dra.Claim(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])


def _timed(call: Callable[[], Any], errors: list[str], what: str) -> float:
    begin = time.perf_counter()
    response = call()
    elapsed = time.perf_counter() - begin
    errors.extend(f"{what} {uid}: {r.error}" for uid, r in response.claims.items() if r.error)
    return elapsed


def _batches(claims: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [claims[i : i + size] for i in range(0, len(claims) - size + 1, size)]


class _Calls(Protocol):
    """What the timing loops need: fresh claims, and a timed prepare and unprepare of a batch."""

    def claims(self, count: int) -> list[Any]:
        """Make ``count`` fresh allocated claims; return what prepare and unprepare take."""

    def prepare(self, claims: Sequence[Any]) -> float:
        """Prepare the claims in one call; return its wall time."""

    def unprepare(self, claims: Sequence[Any]) -> float:
        """Unprepare the claims in one call; return its wall time."""


class _Caller(abc.ABC):
    """Calls one plugin over its unix socket; subclasses store the claims it is given."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = dra_grpc.DRAPluginStub(self.channel)
        self.errors: list[str] = []
        self._made = 0

    def claims(self, count: int) -> list[dra.Claim]:
        """Make ``count`` fresh allocated claims the plugin can read."""
        made = [self._store(_claim_object(self._made + i)) for i in range(count)]
        self._made += count
        return made

    @abc.abstractmethod
    def _store(self, claim: Object) -> dra.Claim:
        """Make ``claim`` readable by the plugin; return its reference."""

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


class Bench(_Caller):
    """``gpushare-dra kubelet-plugin`` as its own process, reading claims from the API server."""

    def __init__(self, work_dir: Path) -> None:
        inventory_file = work_dir / "inventory.yaml"
        inventory = parse_inventory(_INVENTORY)
        inventory_file.write_text(dump_inventory(inventory))
        self.cluster = FakeCluster(inventory, work_dir)
        self.cluster.start()
        self.cluster.apply(default_device_classes(NAMES))
        self.resource = client.ResourceV1Api(self.cluster.api)
        self.plugin: ComponentProcess = start_plugin(self.cluster, NODE, inventory_file)
        self.plugin.wait_ready()
        super().__init__(self.cluster.node_dirs(NODE).plugins / NAMES.driver / "dra.sock")

    def _store(self, claim: Object) -> dra.Claim:
        status = claim.pop("status")
        del claim["metadata"]["uid"]
        created = raw.call(self.resource.create_namespaced_resource_claim, "default", claim)
        stored = raw.call(
            self.resource.replace_namespaced_resource_claim_status,
            created["metadata"]["name"],
            "default",
            {**created, "status": status},
        )
        return _reference(stored)

    def close(self) -> int:
        """Stop the plugin and the cluster; return the plugin's exit status."""
        self.channel.close()
        status = self.plugin.terminate()
        self.cluster.stop()
        return status


def _memory_preparer(
    root: Path, cdi_root: Path, objects: dict[str, Object], cards: Sequence[Card]
) -> ClaimPreparer:
    """Return a started claim state under ``root`` (specs in ``cdi_root``) reading ``objects``.

    A claim is taken out of ``objects`` when it is read, as an API read hands the plugin an
    object of its own: the benchmark keeps no claims alive in the heap the plugin's garbage
    collector walks. Once started, the heap is frozen as the plugin freezes its own.
    """
    preparer = ClaimPreparer(
        NAMES,
        NODE,
        NodePaths(
            plugin_dir=root / "plugin",
            cdi_root=cdi_root,
            driver_root=Path("/"),
            hami_core_library=root / "libvgpu.so",
            mps_pipe_directory=root / "mps",
        ),
        get_claim=lambda _namespace, name: objects.pop(name),
        cards=lambda: cards,
        default_backend=Backend.HAMI_CORE,
    )
    preparer.start()
    freeze_startup_heap()
    return preparer


class AloneBench(_Caller):
    """The plugin's gRPC server and claim state in this process; claims are read from memory."""

    def __init__(self, work_dir: Path, cdi_dir: Path) -> None:
        self._objects: dict[str, Object] = {}
        cards = parse_inventory(_INVENTORY).nodes[0].cards
        preparer = _memory_preparer(work_dir / "alone", cdi_dir / "alone", self._objects, cards)
        registry, socket = socket_paths(
            work_dir / "alone" / "registry", work_dir / "alone" / "plugin", NAMES.driver, ""
        )
        self.server = PluginServer(
            driver=NAMES.driver,
            node=NODE,
            registry_socket=registry,
            dra_socket=socket,
            preparer=preparer,
            cards=lambda: cards,
            metrics=PluginMetrics(CollectorRegistry()),
        )
        self.server.start()
        super().__init__(socket)

    def _store(self, claim: Object) -> dra.Claim:
        self._objects[claim["metadata"]["name"]] = claim
        return _reference(claim)

    def close(self) -> None:
        """Stop the server and close the channel."""
        self.channel.close()
        self.server.stop(grace=0)


class StateBench:
    """The plugin's claim state alone (no gRPC, no API server): checkpoint, specs, directories.

    What a prepare costs the node itself, apart from the transport and the claim's read.
    """

    def __init__(self, work_dir: Path, cdi_dir: Path) -> None:
        self._objects: dict[str, Object] = {}
        self._made = 0
        self.errors: list[str] = []
        cards = parse_inventory(_INVENTORY).nodes[0].cards
        self.preparer = _memory_preparer(
            work_dir / "state", cdi_dir / "state", self._objects, cards
        )

    def claims(self, count: int) -> list[ClaimRef]:
        """Make ``count`` fresh allocated claims, read from memory."""
        refs = []
        for index in range(self._made, self._made + count):
            claim = _claim_object(index)
            self._objects[claim["metadata"]["name"]] = claim
            refs.append(ClaimRef("default", claim["metadata"]["uid"], claim["metadata"]["name"]))
        self._made += count
        return refs

    def prepare(self, claims: Sequence[ClaimRef]) -> float:
        """Prepare the claims in one call; return its wall time."""
        begin = time.perf_counter()
        outcomes = self.preparer.prepare(claims)
        elapsed = time.perf_counter() - begin
        self.errors += [f"prepare {uid}: {o.error}" for uid, o in outcomes.items() if o.error]
        return elapsed

    def unprepare(self, claims: Sequence[ClaimRef]) -> float:
        """Unprepare the claims in one call; return its wall time."""
        begin = time.perf_counter()
        errors = self.preparer.unprepare(claims)
        elapsed = time.perf_counter() - begin
        self.errors += [f"unprepare {uid}: {error}" for uid, error in errors.items() if error]
        return elapsed


def _latencies(bench: _Calls, rounds: int, label: str) -> dict[str, Any]:
    """Time ``rounds`` calls of 1, 8 and 32 fresh claims, each batch unprepared right after.

    Each batch is unprepared before the next is prepared, so the claims already on the node
    stay as the caller left them, and a call's cost can be compared between a node with few
    claims and one with many.
    """
    latency: dict[str, Any] = {}
    for size in (1, 8, 32):
        prepared: list[float] = []
        unprepared: list[float] = []
        for _ in range(rounds):
            batch = bench.claims(size)
            prepared.append(bench.prepare(batch))
            unprepared.append(bench.unprepare(batch))
        latency[f"prepare_{size}"] = latency_summary(prepared)
        latency[f"unprepare_{size}"] = latency_summary(unprepared)
        print(
            f"{label} batch {size:>2}: prepare p50 {latency[f'prepare_{size}']['p50_ms']:.2f} ms "
            f"p99 {latency[f'prepare_{size}']['p99_ms']:.2f} ms; unprepare p50 "
            f"{latency[f'unprepare_{size}']['p50_ms']:.2f} ms "
            f"p99 {latency[f'unprepare_{size}']['p99_ms']:.2f} ms",
            flush=True,
        )
    return latency


def _hold(bench: _Calls, count: int) -> list[Any]:
    """Prepare ``count`` claims (in batches of 32) that stay on the node; return them."""
    held = bench.claims(count)
    for batch in _batches(held, 32):
        bench.prepare(batch)
    return held


def _release(bench: _Calls, held: Sequence[Any]) -> None:
    for batch in _batches(held, 32):
        bench.unprepare(batch)


class _Discard(io.StringIO):
    """A log stream that keeps nothing: rendered as in a cluster, never piled up in memory."""

    def write(self, text: str) -> int:
        """Drop ``text``."""
        return len(text)


def _megabytes(value: int) -> float:
    return round(value / 2**20, 1)


def claim_state(
    work_dir: Path, cdi_dir: Path, *, rounds: int, resident: int, background: int
) -> dict[str, Any]:
    """Time the claim state alone with ``background``, then ``resident``, claims on the node."""
    state = StateBench(work_dir, cdi_dir)
    held = _hold(state, background)
    latency = _latencies(state, rounds, f"claim state alone, {background} on the node")
    _release(state, held)
    held = _hold(state, resident)
    # As many calls as with few claims: the target is this phase's p99, not its maximum.
    loaded = _latencies(state, rounds, f"claim state alone, {resident} on the node")
    _release(state, held)
    return {
        "latency": latency,
        "latency_with_resident": loaded,
        "errors": state.errors,
        "cdi_specs_left": len(list((cdi_dir / "state").glob("*.json"))),
    }


def run(
    work_dir: Path, cdi_dir: Path, *, rounds: int, resident: int, background: int
) -> dict[str, Any]:
    """Measure every figure.

    ``rounds`` calls per batch size with ``background`` claims prepared on the node, then a
    quarter as many with ``resident`` claims prepared (also the RSS figure).
    """
    loaded_rounds = max(rounds // 4, 1)
    bench = Bench(work_dir)
    try:
        time.sleep(1.0)  # let start-up work (slice publishing) settle before measuring memory
        idle_rss = bench.plugin.rss_bytes()
        held = _hold(bench, background)
        latency = _latencies(bench, rounds, f"with API reads, {background} on the node")
        _release(bench, held)
        held = _hold(bench, resident)
        prepared_rss = bench.plugin.rss_bytes()
        latency_loaded = _latencies(bench, loaded_rounds, f"with API reads, {resident} on the node")
        _release(bench, held)
        after_rss = bench.plugin.rss_bytes()
        specs_left = len(list(bench.cluster.node_dirs(NODE).cdi.glob("*.json")))
    finally:
        status = bench.close()
    # Rendered as in a cluster (JSON), but not onto this terminal: the plugin logs per claim.
    configure_logging(level="info", fmt=LogFormat.JSON, stream=_Discard())
    alone = AloneBench(work_dir, cdi_dir)
    try:
        held = _hold(alone, background)
        latency_alone = _latencies(alone, rounds, f"plugin alone, {background} on the node")
        _release(alone, held)
        specs_left += len(list((cdi_dir / "alone").glob("*.json")))
    finally:
        alone.close()
    state = claim_state(work_dir, cdi_dir, rounds=rounds, resident=resident, background=background)
    errors = bench.errors + alone.errors + state["errors"]
    specs_left += state["cdi_specs_left"]
    latency_state, latency_state_loaded = state["latency"], state["latency_with_resident"]
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
        "plugin_alone_prepare_1_p99_ms": latency_alone["prepare_1"]["p99_ms"],
        "plugin_alone_prepare_32_p99_ms": latency_alone["prepare_32"]["p99_ms"],
        "claim_state_prepare_1_p99_ms": latency_state_loaded["prepare_1"]["p99_ms"],
        "claim_state_prepare_32_p99_ms": latency_state_loaded["prepare_32"]["p99_ms"],
    }
    return {
        "benchmark": "prepare",
        "machine": machine(),
        "rounds": rounds,
        "rounds_with_resident": loaded_rounds,
        "background_claims": background,
        "resident_claims": resident,
        "latency": latency,
        "latency_with_resident": latency_loaded,
        "latency_plugin_alone": latency_alone,
        "latency_claim_state": latency_state,
        "latency_claim_state_with_resident": latency_state_loaded,
        "memory": memory,
        "errors": errors,
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
    parser.add_argument(
        "--background", type=int, default=64, help="claims on the node while timing calls"
    )
    parser.add_argument(
        "--claims", type=int, default=1000, help="claims held for the RSS and loaded figures"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument(
        "--no-gc",
        action="store_true",
        help="with --claim-state-only: turn off Python's cyclic garbage collector, to see its "
        "share of the tail",
    )
    parser.add_argument(
        "--claim-state-only",
        action="store_true",
        help="time only the claim state (checkpoint, specs, directories): no gRPC, no API server",
    )
    parser.add_argument(
        "--under",
        default="/tmp",  # noqa: S108 - short, for unix socket paths; mkdtemp makes it private
        help="where the node's directories go: its filesystem's fsync is most of a call's cost "
        "(short: unix socket paths must stay under 108 bytes)",
    )
    parser.add_argument(
        "--cdi-under",
        default=_TMPFS if Path(_TMPFS).is_dir() else None,
        help="where the CDI specs go (plugin alone, claim state): on a node /var/run/cdi is on "
        "/run, a tmpfs, hence /dev/shm where it exists; give --under's directory to put them "
        "on the disk as well",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.claims, args.background = 4, 64, 8
    work_dir = Path(tempfile.mkdtemp(prefix="gpb-", dir=args.under))
    cdi_dir = Path(tempfile.mkdtemp(prefix="gpb-cdi-", dir=args.cdi_under or args.under))
    try:
        sizes = {"rounds": args.rounds, "resident": args.claims, "background": args.background}
        if args.claim_state_only:
            configure_logging(level="info", fmt=LogFormat.JSON, stream=_Discard())
            if args.no_gc:
                gc.disable()
            figures = claim_state(work_dir, cdi_dir, **sizes)
            emit({"benchmark": "prepare", "machine": machine(), **figures})
        else:
            emit(run(work_dir, cdi_dir, **sizes))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        shutil.rmtree(cdi_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
