#!/usr/bin/env python3
"""Benchmark the allocation engine alone: decisions per second and latency by cluster size.

Synthetic clusters of N nodes x 8 cards (H100 80GB, with every 4th node an A100 40GB node so
placement is not all ties), filled to an occupancy by random shares, then a stream of mixed
claims placed one by one exactly as the controller does: ``place_pod`` on the cached snapshot,
then the allocation counted in place (``Snapshot.update_claim``). A decision's time covers
both. The first decisions of each cell are reported apart as cold (see :func:`run_cell`).
To keep the occupancy steady, each placed claim is later released (``remove_claim``) in
arrival order once a window of recent claims is full.

The mix: whole cards, quarter cards, half cards, two whole cards with a matching NUMA node,
quarter cards with a CEL selector on product and memory, and offline quarter cards.

    python hack/bench/allocator.py                      # the full matrix (about 3 minutes)
    python hack/bench/allocator.py --sizes 1000 --occupancy 50
    python hack/bench/allocator.py --smoke              # tiny, for the test suite

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import uuid
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Final

from benchlib import emit, latency_summary, machine, per_yardstick

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames, Placement
from dra_driver.engine import Placed, Policy, Snapshot, place_pod
from dra_driver.k8s.objects import Object
from dra_driver.nvml.inventory import parse_inventory
from dra_driver.plan.inventory import inventory_cluster

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
CARDS_PER_NODE: Final = 8
TARGET_NODES: Final = 1000
TARGET_P99_MS: Final = 2.0
TARGET_DECISIONS_PER_SECOND: Final = 2000.0
TARGET_DECISIONS_PER_YARDSTICK_S: Final = 1000.0
"""2,000 decisions/s on a machine whose yardstick (benchlib.yardstick_s) is 0.5 s."""
TIMESTAMP: Final = "2026-01-01T00:00:00Z"

_INVENTORY: Final = """
generate:
  nodes: {count}
  namePrefix: {prefix}
  cardsPerNode: 8
  card:
    productName: {product}
    memory: {memory}
    architecture: {arch}
    cudaComputeCapability: "{cc}"
    driverVersion: "550.54.15"
    numaNodes: 2
"""


def build_cluster(nodes: int) -> Snapshot:
    """Return an empty snapshot of ``nodes`` nodes: three H100 nodes to each A100 node."""
    a100 = nodes // 4
    documents = [
        _INVENTORY.format(
            count=nodes - a100,
            prefix="h100-",
            product="NVIDIA H100 80GB HBM3",
            memory="80Gi",
            arch="Hopper",
            cc="9.0",
        ),
    ]
    if a100:
        documents.append(
            _INVENTORY.format(
                count=a100,
                prefix="a100-",
                product="NVIDIA A100-SXM4-40GB",
                memory="40Gi",
                arch="Ampere",
                cc="8.0",
            )
        )
    slices: list[Object] = []
    node_objects: list[Object] = []
    classes: tuple[Object, ...] = ()
    for document in documents:
        cluster = inventory_cluster(NAMES, parse_inventory(document), "bench")
        slices += cluster.slices
        node_objects += cluster.nodes
        classes = cluster.classes
    return Snapshot.build(NAMES, nodes=node_objects, slices=slices, classes=classes, claims=[])


def _claim(name: str, request: Object, *, config: Sequence[Object] = ()) -> Object:
    devices: Object = {"requests": [{"name": "gpu", "exactly": request}]}
    if config:
        devices["config"] = list(config)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": str(uuid.uuid4())},
        "spec": {"devices": devices},
    }


def _share(cores: int, memory: str, **extra: Any) -> Object:  # noqa: ANN401 - request fields
    return {
        "deviceClassName": NAMES.driver,
        "capacity": {"requests": {"cores": str(cores), "memory": memory}},
        **extra,
    }


def _whole(name: str) -> Object:
    return _claim(name, {"deviceClassName": NAMES.driver})


def _quarter(name: str) -> Object:
    return _claim(name, _share(25, "10Gi"))


def _half(name: str) -> Object:
    return _claim(name, _share(50, "20Gi"))


def _two_cards(name: str) -> Object:
    claim = _claim(name, {"deviceClassName": NAMES.driver, "count": 2})
    claim["spec"]["devices"]["constraints"] = [
        {"requests": ["gpu"], "matchAttribute": f"{NAMES.driver}/numaNode"}
    ]
    return claim


def _selected(name: str) -> Object:
    expression = (
        f'device.attributes["{NAMES.driver}"].productName.startsWith("NVIDIA H100") && '
        f'device.capacity["{NAMES.driver}"].memory.compareTo(quantity("64Gi")) >= 0'
    )
    return _claim(name, _share(25, "10Gi", selectors=[{"cel": {"expression": expression}}]))


def _offline(name: str) -> Object:
    return _claim(name, {**_share(25, "10Gi"), "deviceClassName": f"offline.{NAMES.driver}"})


MIX: Final[tuple[tuple[str, Callable[[str], Object], int], ...]] = (
    ("whole", _whole, 15),
    ("quarter", _quarter, 35),
    ("half", _half, 15),
    ("two-cards-same-numa", _two_cards, 10),
    ("selector", _selected, 15),
    ("offline-quarter", _offline, 10),
)


def _pick_kind(rng: random.Random) -> tuple[str, Callable[[str], Object]]:
    kinds = [(name, build) for name, build, _ in MIX]
    weights = [weight for _, _, weight in MIX]
    return rng.choices(kinds, weights)[0]


def _pod(name: str) -> Object:
    return {"metadata": {"name": name, "namespace": "bench", "uid": str(uuid.uuid4())}}


def _commit(snapshot: Snapshot, claim: Object, decision: Placed) -> Object:
    allocated = {**claim, "status": {"allocation": decision.claims[0].status(TIMESTAMP)}}
    snapshot.update_claim(allocated)
    return allocated


def _occupancy(snapshot: Snapshot) -> float:
    total = Fraction(0)
    used = Fraction(0)
    for device in snapshot.by_id.values():
        for name, capacity in device.capacities.items():
            free = snapshot.state.free(device.id, device.capacities)[name]
            if device.id in snapshot.state.exclusive:
                free = Fraction(0)
            total += capacity.value
            used += capacity.value - free
    return float(used / total) if total else 0.0


def fill(snapshot: Snapshot, occupancy: float, rng: random.Random) -> float:
    """Allocate random shares on random cards until ``occupancy`` of capacity is used.

    Random cards, not the engine's choice: a cluster that has lived a while is fragmented.
    """
    if occupancy <= 0:
        return 0.0
    devices = list(snapshot.by_id.values())
    capacity = sum(
        (
            c.value / device.capacities[n].value
            for device in devices
            for n, c in device.capacities.items()
        ),
        Fraction(0),
    )
    wanted = Fraction(occupancy).limit_denominator(100) * capacity
    used = Fraction(0)
    attempts = 0
    while used < wanted and attempts < 50 * len(devices):
        attempts += 1
        device = rng.choice(devices)
        quarters = rng.choice((1, 1, 2, 4))
        free = snapshot.state.free(device.id, device.capacities)
        if device.id in snapshot.state.exclusive or free["cores"] < 25 * quarters:
            continue
        memory = device.capacities["memory"].value * quarters / 4
        if free["memory"] < memory:
            continue
        result = {
            "request": "gpu", "driver": NAMES.driver, "pool": device.id[1],
            "device": device.name, "shareID": str(uuid.uuid4()),
            "consumedCapacity": {"cores": str(25 * quarters), "memory": str(int(memory))},
        }  # fmt: skip
        snapshot.update_claim(
            {
                "metadata": {
                    "name": f"fill-{attempts}",
                    "namespace": "bench",
                    "uid": str(uuid.uuid4()),
                },
                "status": {"allocation": {"devices": {"results": [result], "config": []}}},
            }
        )
        used += Fraction(quarters, 4) * 2  # cores and memory, each a quarter per quarter
    return _occupancy(snapshot)


def run_cell(
    nodes: int,
    occupancy: float,
    policy_name: str,
    *,
    decisions: int,
    warmup: int,
    window: int,
    seed: int,
) -> dict[str, Any]:
    """Measure ``decisions`` placements on one cluster size, occupancy and policy.

    The first ``warmup`` decisions are reported apart, as ``cold``: they pay for what a
    snapshot learns once (a CEL value per device a selector looks at, consumption per model).
    """
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    started = time.perf_counter()
    snapshot = build_cluster(nodes)
    build_seconds = time.perf_counter() - started
    actual = fill(snapshot, occupancy, rng)
    # Each cell starts from a clean heap: the cells run in one process, and the earlier cells'
    # snapshots, garbage by now, would otherwise be collected in the middle of this one.
    gc.collect()
    placement = Placement(policy_name)
    policy = Policy(node=placement, online=placement, offline=placement)
    share_ids = (f"bench-{i}" for i in range(10**9))
    # The window of live claims must leave room, or a small cluster is full after a few steps.
    window = min(window, nodes * CARDS_PER_NODE // 4)
    recent: list[str] = []
    times: list[float] = []
    by_outcome: dict[str, list[float]] = {"placed": [], "unplaceable": []}
    outcomes: dict[str, dict[str, int]] = {}
    cold: list[float] = []
    for index in range(warmup + decisions):
        kind, build = _pick_kind(rng)
        claim = build(f"claim-{index}")
        pod = _pod(f"pod-{index}")
        begin = time.perf_counter()
        decision = place_pod(snapshot, pod, [claim], policy, share_id=lambda: next(share_ids))
        if isinstance(decision, Placed):
            _commit(snapshot, claim, decision)
        elapsed = time.perf_counter() - begin
        outcome = "placed" if isinstance(decision, Placed) else "unplaceable"
        if index < warmup:
            cold.append(elapsed)
        else:
            times.append(elapsed)
            by_outcome[outcome].append(elapsed)
            counts = outcomes.setdefault(kind, {"placed": 0, "unplaceable": 0})
            counts[outcome] += 1
        if isinstance(decision, Placed):
            recent.append(claim["metadata"]["uid"])
            if len(recent) > window:
                snapshot.remove_claim(recent.pop(0))
    total = sum(times)
    return {
        "nodes": nodes,
        "cards": nodes * CARDS_PER_NODE,
        "occupancy_target": occupancy,
        "occupancy_actual": round(actual, 3),
        "policy": policy_name,
        "snapshot_build_s": round(build_seconds, 3),
        "decisions_per_s": round(len(times) / total, 1) if total else 0.0,
        "latency": latency_summary(times),
        "latency_placed": latency_summary(by_outcome["placed"]),
        "latency_unplaceable": latency_summary(by_outcome["unplaceable"]),
        "latency_cold": latency_summary(cold),
        "outcomes": outcomes,
        # The engine must never over-commit; a benchmark that did would measure a bug.
        "overcommitted_nodes": len(snapshot.load.overcommitted),
    }


def _growth(cells: list[dict[str, Any]]) -> dict[str, float]:
    """p50 at each size over p50 at the smallest, averaged over occupancies and policies."""
    by_size: dict[int, list[float]] = {}
    for cell in cells:
        by_size.setdefault(cell["nodes"], []).append(cell["latency"]["p50_ms"])
    sizes = sorted(by_size)
    base = sum(by_size[sizes[0]]) / len(by_size[sizes[0]])
    return {str(size): round(sum(v) / len(v) / base, 2) for size, v in sorted(by_size.items())}


def _targets(cells: list[dict[str, Any]], yardstick: float) -> dict[str, Any]:
    at_target = [cell for cell in cells if cell["nodes"] == TARGET_NODES]
    if not at_target:
        return {}
    worst_p99 = max(cell["latency"]["p99_ms"] for cell in at_target)
    worst_rate = min(cell["decisions_per_s"] for cell in at_target)
    normalized = per_yardstick(worst_rate, yardstick)
    return {
        "p99_ms_at_1000_nodes": {
            "limit": TARGET_P99_MS,
            "measured": worst_p99,
            "pass": worst_p99 <= TARGET_P99_MS,
        },
        "decisions_per_s_at_1000_nodes": {
            "limit": TARGET_DECISIONS_PER_SECOND,
            "measured": worst_rate,
            "pass": worst_rate >= TARGET_DECISIONS_PER_SECOND,
        },
        # The same, machine speed cancelled: decisions in the time of the yardstick loop.
        "decisions_per_yardstick_s_at_1000_nodes": {
            "limit": TARGET_DECISIONS_PER_YARDSTICK_S,
            "measured": normalized,
            "pass": normalized >= TARGET_DECISIONS_PER_YARDSTICK_S,
        },
    }


def _row(cell: dict[str, Any]) -> str:
    placed = sum(outcome["placed"] for outcome in cell["outcomes"].values())
    latency = cell["latency"]
    return (
        f"{cell['nodes']:>6} {cell['occupancy_target'] * 100:>5.0f} {cell['policy']:>8} "
        f"{cell['decisions_per_s']:>9.1f} {latency['p50_ms']:>8.3f} {latency['p99_ms']:>8.3f} "
        f"{latency['max_ms']:>8.3f} {placed:>7} {cell['latency_placed']['p99_ms']:>10.3f} "
        f"{cell['latency_unplaceable']['p99_ms']:>15.3f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Run the matrix and print a table, then the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,5000", help="node counts, comma-separated")
    parser.add_argument(
        "--occupancy", default="0,50,90", help="percent of capacity, comma-separated"
    )
    parser.add_argument("--policies", default="binpack,spread")
    parser.add_argument("--decisions", type=int, default=1000, help="measured decisions per cell")
    parser.add_argument(
        "--window", type=int, default=200, help="claims kept before release (at most cards/4)"
    )
    parser.add_argument(
        "--warmup", type=int, default=100, help="decisions first, reported apart as cold"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.occupancy, args.decisions, args.window = "4,8", "0,90", 40, 10
        args.warmup = 5
    host = machine()
    cells = []
    header = (
        f"{'nodes':>6} {'occ%':>5} {'policy':>8} {'dec/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'placed':>7} {'p99 placed':>10} {'p99 unplaceable':>15}"
    )
    print(header)
    for nodes in (int(s) for s in args.sizes.split(",")):
        for occupancy in (int(o) / 100 for o in args.occupancy.split(",")):
            for policy in args.policies.split(","):
                cell = run_cell(
                    nodes,
                    occupancy,
                    policy,
                    decisions=args.decisions,
                    warmup=args.warmup,
                    window=args.window,
                    seed=args.seed,
                )
                cells.append(cell)
                print(_row(cell), flush=True)
    emit(
        {
            "benchmark": "allocator",
            "machine": host,
            "cells": cells,
            "growth_p50_vs_smallest": _growth(cells),
            "targets": _targets(cells, host["yardstick_s"]),
        }
    )


if __name__ == "__main__":
    main()
