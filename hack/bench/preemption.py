#!/usr/bin/env python3
"""What one preemption question costs the controller's allocating worker.

A cluster of H100 nodes (8 cards each) is filled with offline shares of 25 cores (four to a
card), each its own running pod: the worst case for the search, every card a candidate. Then
online pods of several sizes that fit nowhere ask who would go; each question is timed: the
candidate list (``victims``) and the search (``preempt``), as the controller makes them on a
pod's pass. A question the cluster cannot answer (nothing fits even after evictions) is timed
too: the controller then pauses that pod's searches (5 s, doubling to 60 s).

Prints p50, p99 and max per cluster size, and the CPU yardstick, then one JSON line.

    python hack/bench/preemption.py            # 10, 100 and 250 nodes, 20 questions each
    python hack/bench/preemption.py --smoke    # 4 nodes, 3 questions
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any, Final

from benchlib import emit, h100_nodes, latency_summary, machine

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames, Placement
from dra_driver.engine import Placed, Policy, Snapshot, place_pod
from dra_driver.engine.preempt import Preemption, preempt, victims
from dra_driver.k8s.objects import Object
from dra_driver.plan.inventory import inventory_cluster

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
BINPACK: Final = Policy.uniform(Placement.BINPACK)
# Online sizes: one victim, three, four (a whole card), and one that fits nowhere at all.
ASKS: Final = (("20", "10Gi"), ("60", "30Gi"), ("100", "80Gi"), ("100", "200Gi"))


def claim(name: str, cores: str, memory: str, *, offline: bool) -> Object:
    """Return a claim of one share; offline ones through the offline class."""
    device_class = NAMES.offline_device_class if offline else NAMES.default_device_class
    request = {"deviceClassName": device_class}
    request["capacity"] = {"requests": {"cores": cores, "memory": memory}}  # type: ignore[assignment]
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def pod(name: str) -> Object:
    """Return a pod using the claim of the same name."""
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"pod-{name}"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": name}]},
    }


def full_cluster(nodes: int) -> tuple[Snapshot, dict[tuple[str, str], Object]]:
    """Return a snapshot whose every card holds four offline shares, and their running pods."""
    cluster = inventory_cluster(NAMES, h100_nodes(nodes, "h100-"), "bench")
    snapshot = Snapshot.build(
        NAMES, nodes=cluster.nodes, slices=cluster.slices, classes=cluster.classes, claims=[]
    )
    pods: dict[tuple[str, str], Object] = {}
    ids = (f"share-{n}" for n in itertools.count())
    for index in range(nodes * 8 * 4):
        name = f"batch-{index}"
        made, runner = claim(name, "25", "20Gi", offline=True), pod(name)
        decision = place_pod(snapshot, runner, [made], BINPACK, share_id=lambda: next(ids))
        assert isinstance(decision, Placed), decision
        allocation = decision.claims[0].status("2026-11-29T00:00:00Z")
        reserved = [{"resource": "pods", "name": name, "uid": runner["metadata"]["uid"]}]
        snapshot.update_claim(
            {**made, "status": {"allocation": allocation, "reservedFor": reserved}}
        )
        runner["spec"]["nodeName"] = decision.node
        runner["metadata"]["creationTimestamp"] = f"2026-11-{1 + index % 28:02d}T00:00:00Z"
        pods[("bench", name)] = runner
    return snapshot, pods


def questions(nodes: int, count: int) -> dict[str, Any]:
    """Time ``count`` questions on a full cluster of ``nodes`` nodes."""
    snapshot, pods = full_cluster(nodes)
    seconds, victims_seen = [], []
    for index in range(count):
        cores, memory = ASKS[index % len(ASKS)]
        online, asker = claim(f"online-{index}", cores, memory, offline=False), pod("online")
        started = time.perf_counter()
        candidates = victims(snapshot, asker, lambda ns, n: pods.get((ns, n)))
        found = preempt(snapshot, asker, [online], BINPACK, candidates=candidates)
        seconds.append(time.perf_counter() - started)
        victims_seen.append(len(found.victims) if isinstance(found, Preemption) else 0)
    return {
        "nodes": nodes,
        "offline_pods": len(pods),
        "seconds": latency_summary(seconds),
        "victims_per_question": sorted(set(victims_seen)),
    }


def main() -> None:
    """Run the sizes, print a line each and the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="4 nodes, 3 questions")
    args = parser.parse_args()
    sizes, count = ((4,), 3) if args.smoke else ((10, 100, 250), 20)
    cells = []
    for nodes in sizes:
        cell = questions(nodes, count)
        figures = cell["seconds"]
        print(
            f"{nodes:4d} nodes, {cell['offline_pods']:5d} offline pods: p50 "
            f"{figures['p50_ms']:7.1f} ms  p99 {figures['p99_ms']:7.1f} ms  "
            f"max {figures['max_ms']:7.1f} ms  victims {cell['victims_per_question']}",
            flush=True,
        )
        cells.append(cell)
    emit({"benchmark": "preemption", "machine": machine(), "cells": cells})


if __name__ == "__main__":
    main()
