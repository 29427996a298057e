#!/usr/bin/env python3
"""Benchmark the controller's memory at cluster scale on a real Kubernetes control plane.

The cluster of hack/bench/realplane.py (real etcd, kube-apiserver, kube-controller-manager and
kube-scheduler; the chart installed; ``gpushare-dra controller`` under its ServiceAccount) at
N GPU nodes of 8 H100 80GB cards, holding C allocated claims (a quarter card each), each
reserved for a pod bound to its node, all created through the API server before the
controller starts (the objects as hack/bench/memory.py makes them for the fake API server).
The controller then starts, lists everything, leads, and places one more gated pod; its
resident set size (VmRSS) and peak (VmHWM) are read from /proc.

    python hack/bench/realmemory.py                      # 1,000 nodes, 20,000 claims and pods
    python hack/bench/realmemory.py --nodes 100 --claims 2000
    python hack/bench/realmemory.py --smoke              # tiny, for the test suite

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import concurrent.futures
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from benchlib import emit, machine, proc_status_bytes
from kubernetes import client
from memory import (
    CARDS_PER_NODE,
    NAMES,
    NAMESPACE,
    SHARES_PER_CARD,
    TARGET_BYTES,
    TARGET_CLAIMS,
    TARGET_NODES,
    bench_pod,
    quarter_allocation,
    quarter_claim,
    size_parser,
)
from realplane import Bench, gpu_inventory, started

from dra_driver.k8s import raw
from dra_driver.k8s.objects import Object

_WRITERS: Final = 8
"""Threads creating the objects: the API server, not one client's round trips, sets the pace."""


def _orphan(pod: Object) -> Object:
    """Return ``pod`` without its owner (a real garbage collector deletes an orphaned pod)."""
    return {**pod, "metadata": {k: v for k, v in pod["metadata"].items() if k != "ownerReferences"}}


class Filler:
    """Creates C allocated claims, each reserved for a pod bound to its node."""

    def __init__(self, nodes: list[str], claims: int) -> None:
        cards = len(nodes) * CARDS_PER_NODE
        if claims > cards * (SHARES_PER_CARD - 1):
            raise SystemExit(f"--claims {claims}: at most {cards * (SHARES_PER_CARD - 1)} here")
        self.nodes, self.claims = nodes, claims
        self.seconds = 0.0

    def __call__(self, bench: Bench) -> None:
        """Fill the cluster of ``bench``, ``_WRITERS`` objects at a time."""
        started_at = time.monotonic()
        bench.applier.create([{"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": NAMESPACE}}])  # fmt: skip
        resource = client.ResourceV1Api(bench.api)
        with concurrent.futures.ThreadPoolExecutor(_WRITERS) as pool:
            done = pool.map(lambda i: self._one(bench, resource, i), range(self.claims))
            for count, _ in enumerate(done, 1):
                if count % 2000 == 0:
                    print(f"  {count} claims and pods ({time.monotonic() - started_at:.0f} s)",
                          flush=True)  # fmt: skip
        self.seconds = time.monotonic() - started_at

    def _one(self, bench: Bench, resource: client.ResourceV1Api, index: int) -> None:
        slot = index % (len(self.nodes) * CARDS_PER_NODE)
        node = self.nodes[slot // CARDS_PER_NODE]
        made = quarter_claim(index)
        made["metadata"]["finalizers"] = [NAMES.finalizer]  # committed by the controller
        (claim,) = bench.applier.create([made])
        (pod,) = bench.applier.create([_orphan(bench_pod(index, node))])
        reference = {"resource": "pods", "name": pod["metadata"]["name"],
                     "uid": pod["metadata"]["uid"]}  # fmt: skip
        status = {"allocation": quarter_allocation(index, node, slot % CARDS_PER_NODE),
                  "reservedFor": [reference]}  # fmt: skip
        raw.call(resource.patch_namespaced_resource_claim_status, claim["metadata"]["name"],
                 NAMESPACE, {"status": status})  # fmt: skip


def _placed(bench: Bench, probe: int, timeout: float) -> float:
    """Create a gated pod with a claim of its own; return seconds until it is ungated."""
    started_at = time.monotonic()
    bench.applier.create([quarter_claim(probe)])
    bench.applier.create([_orphan(bench_pod(probe, None))])  # the webhook gates it
    core = client.CoreV1Api(bench.api)
    while True:
        pod = raw.call(core.read_namespaced_pod, f"p-{probe}", NAMESPACE)
        if not pod["spec"].get("schedulingGates"):
            return time.monotonic() - started_at
        if time.monotonic() - started_at > timeout:
            raise TimeoutError(f"the probe pod p-{probe} was not placed in {timeout:g} s")
        time.sleep(0.2)


def main(argv: Sequence[str] | None = None) -> None:
    """Fill the real plane, start the controller, place one pod, print its memory."""
    args = size_parser(__doc__.splitlines()[0], "4 nodes, 40 claims").parse_args(argv)
    nodes, claims = (4, 40) if args.smoke else (args.nodes, args.claims)
    inventory = gpu_inventory(nodes)
    fill = Filler([n.name for n in inventory.nodes], claims)
    work = Path(tempfile.mkdtemp(prefix="rm", dir="/tmp"))  # short: sockets live under it
    try:
        with started(work, inventory, fill) as bench:
            print(f"cluster: {nodes} nodes x {CARDS_PER_NODE} cards, {claims} claims and pods "
                  f"(made in {fill.seconds:.0f} s)", flush=True)  # fmt: skip
            placed = _placed(bench, claims, args.timeout)
            time.sleep(2.0)  # the watch delivers the controller's own writes
            pid = bench.processes()["controller"]
            figures = {
                "rss_bytes": proc_status_bytes(pid, "VmRSS"),
                "peak_rss_bytes": proc_status_bytes(pid, "VmHWM"),
                "placed_after_s": round(placed, 2),
                "leading_after_s": round(bench.leading_after_s, 1),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"controller: RSS {figures['rss_bytes'] / 10**6:.1f} MB, peak "
          f"{figures['peak_rss_bytes'] / 10**6:.1f} MB, leading "
          f"{figures['leading_after_s']:.1f} s after its start", flush=True)  # fmt: skip
    at_target = (nodes, claims) == (TARGET_NODES, TARGET_CLAIMS)
    emit({"benchmark": "realmemory", "nodes": nodes, "cards": nodes * CARDS_PER_NODE,
          "claims": claims, "pods": claims, "fill_s": round(fill.seconds, 1), **figures,
          "target": {"limit_bytes": TARGET_BYTES, "measured_bytes": figures["peak_rss_bytes"],
                     "pass": figures["peak_rss_bytes"] <= TARGET_BYTES,
                     "at_target_size": at_target},
          "machine": machine()})  # fmt: skip


if __name__ == "__main__":
    main()
