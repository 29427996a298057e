#!/usr/bin/env python3
"""Benchmark the controller's memory at cluster scale, with its informers slimmed and without.

A fake API server (no harness actors: nothing but the controller acts) holding N nodes x 8
H100 80GB cards, shaped like a real one (see
simulator/gpushare_simulator/harness/lifelike.py: nodes with their image lists and conditions,
running Deployment pods with environment, probes and container statuses, managedFields on
every object), holding C allocated claims, each reserved for one running pod. Then
``gpushare-dra controller`` runs against it twice, as a real process, one after the other:

- ``unslimmed``: informers as before, every object cached whole and listed in one response
  (the process starts through a bootstrap that turns the transforms and paging off);
- ``slimmed``: the controller as shipped.

Each run waits until the controller leads and has allocated one more gated pod (so its
allocation snapshot is built over every claim), then reads the process's resident set size
(VmRSS) and its peak (VmHWM) from /proc. Setting the cluster up takes most of the time.

    python hack/bench/memory.py                  # 1,000 nodes, 20,000 claims and pods
    python hack/bench/memory.py --nodes 100 --claims 2000
    python hack/bench/memory.py --smoke          # tiny, for the test suite

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from benchlib import emit, h100_nodes, machine, proc_status_bytes
from gpushare_simulator.harness.apiserver import FakeApiServer
from gpushare_simulator.harness.lifelike import lifelike_claim, lifelike_node, lifelike_pod
from gpushare_simulator.harness.processes import ComponentProcess

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.nvml.inventory import Inventory
from dra_driver.plan.inventory import node_object, node_slices

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NAMESPACE: Final = "bench"
CARDS_PER_NODE: Final = 8
SHARES_PER_CARD: Final = 4
TARGET_BYTES: Final = 300 * 10**6
TARGET_NODES, TARGET_CLAIMS = 1000, 20_000
# Runs the controller with the informers as they were before slimming: whole objects, and
# every list in one response. Only the benchmark's child process is changed.
_UNSLIMMED: Final = """
import sys
from dra_driver.k8s import informer
plain = informer.Informer.__init__
def whole(self, *args, **kwargs):
    kwargs["transform"] = None
    kwargs["page_size"] = 0
    plain(self, *args, **kwargs)
informer.Informer.__init__ = whole
from dra_driver.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def quarter_claim(index: int) -> Object:
    """Return claim ``c-<index>`` for a quarter of a card, unallocated."""
    return lifelike_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"c-{index}", "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": NAMES.default_device_class,
                "capacity": {"requests": {"cores": "25", "memory": "20Gi"}},
            }}]}},
        }
    )  # fmt: skip


def quarter_allocation(index: int, node: str, card: int) -> Object:
    """Return the allocation of claim ``c-<index>``: a quarter of ``node``'s card."""
    result = {
        "request": "gpu", "driver": NAMES.driver, "pool": node, "device": f"gpu-{card}",
        "shareID": f"00000000-0000-4000-8000-{index:012d}",
        "consumedCapacity": {"cores": "25", "memory": "20Gi"},
    }  # fmt: skip
    return {
        "devices": {"results": [result], "config": []},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        "allocationTimestamp": "2026-11-20T10:00:00Z",
    }  # fmt: skip


def bench_pod(index: int, node: str | None, *, gated: bool = False) -> Object:
    """Return pod ``p-<index>`` (claim ``c-<index>``), as a Deployment's pod on ``node``."""
    thin: Object = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{index}", "namespace": NAMESPACE},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": f"c-{index}"}]},
    }
    pod = lifelike_pod(thin, node)
    if gated:
        pod["spec"]["schedulingGates"] = [{"name": NAMES.scheduling_gate}]
    return pod


def populate(server: FakeApiServer, inventory: Inventory, claims: int) -> float:
    """Make the cluster look lived in: lifelike nodes, C allocated claims, C running pods."""
    started = time.monotonic()
    for inventory_node in inventory.nodes:
        life = lifelike_node(node_object(inventory_node))
        server.update_status({**server.create(life), "status": life["status"]})
        for slice_ in node_slices(NAMES, inventory_node):
            server.create(slice_)
    for device_class in default_device_classes(NAMES):
        server.create(device_class)
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    nodes = [n.name for n in inventory.nodes]
    cards = len(nodes) * CARDS_PER_NODE
    if claims > cards * (SHARES_PER_CARD - 1):
        raise SystemExit(f"--claims {claims}: at most {cards * (SHARES_PER_CARD - 1)} here")
    for index in range(claims):
        slot = index % cards
        node = nodes[slot // CARDS_PER_NODE]
        made = quarter_claim(index)
        made["metadata"]["finalizers"] = [NAMES.finalizer]  # committed by the controller
        stored = server.create(made)
        pod = server.create(bench_pod(index, node))
        status = {
            "allocation": quarter_allocation(index, node, slot % CARDS_PER_NODE),
            "reservedFor": [
                {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
            ],
        }
        server.update_status({**stored, "status": status})
    return time.monotonic() - started


def measure(
    server: FakeApiServer, work: Path, mode: str, probe: int, timeout: float
) -> dict[str, Any]:
    """Run the controller in ``mode`` until it has placed pod ``probe``; return its memory."""
    argv = [
        sys.executable,
        *(["-c", _UNSLIMMED] if mode == "unslimmed" else ["-m", "dra_driver"]),
        "controller",
        "--driver-name", NAMES.driver,
        "--kubeconfig", str(server.write_kubeconfig(work / "kubeconfig")),
        "--no-leader-elect",
        "--metrics-port", "-1",
        "--log-format", "json",
    ]  # fmt: skip
    controller = ComponentProcess(
        argv, work / f"controller-{mode}.log", ready_event="controller.started"
    )
    started = time.monotonic()
    try:
        controller.wait_ready(timeout)
        server.create(quarter_claim(probe))
        server.create(bench_pod(probe, None, gated=True))
        deadline = time.monotonic() + timeout
        while True:
            pod = server.get("pods", NAMESPACE, f"p-{probe}") or {}
            if not objects.spec(pod).get("schedulingGates"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{mode}: the probe pod was not placed:\n{controller.output()}")
            time.sleep(0.2)
        placed = time.monotonic() - started
        time.sleep(2.0)  # let the watch deliver the controller's own writes
        return {
            "rss_bytes": proc_status_bytes(controller.pid, "VmRSS"),
            "peak_rss_bytes": proc_status_bytes(controller.pid, "VmHWM"),
            "start_to_placed_s": round(placed, 2),
        }
    finally:
        controller.terminate()


def size_parser(description: str, smoke: str) -> argparse.ArgumentParser:
    """Return the flags of a memory benchmark: cluster size, timeout, smoke size."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--nodes", type=int, default=TARGET_NODES)
    parser.add_argument("--claims", type=int, default=TARGET_CLAIMS, help="and as many pods")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--smoke", action="store_true", help=smoke)
    return parser


def _mb(value: int) -> str:
    return f"{value / 10**6:.1f}"


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the flags, build the cluster, measure both modes and print the figures."""
    args = size_parser(__doc__.splitlines()[0], "10 nodes, 100 claims").parse_args(argv)
    nodes, claims = (10, 100) if args.smoke else (args.nodes, args.claims)
    inventory: Inventory = h100_nodes(nodes, "node-")
    with (
        tempfile.TemporaryDirectory(prefix="gs-mem-", dir="/tmp") as work,
        FakeApiServer() as server,
    ):
        setup = populate(server, inventory, claims)
        print(f"cluster: {nodes} nodes x {CARDS_PER_NODE} cards, {claims} claims and pods "
              f"(set up in {setup:.0f} s)", flush=True)  # fmt: skip
        modes = {}
        for number, mode in enumerate(("unslimmed", "slimmed")):
            modes[mode] = measure(server, Path(work), mode, claims + number, args.timeout)
            figures = modes[mode]
            print(f"{mode:>10}  RSS {_mb(figures['rss_bytes'])} MB  peak "
                  f"{_mb(figures['peak_rss_bytes'])} MB  placed after "
                  f"{figures['start_to_placed_s']} s", flush=True)  # fmt: skip
    slimmed, unslimmed = modes["slimmed"], modes["unslimmed"]
    at_target = (nodes, claims) == (TARGET_NODES, TARGET_CLAIMS)
    emit(
        {
            "benchmark": "memory",
            "nodes": nodes,
            "cards": nodes * CARDS_PER_NODE,
            "claims": claims,
            "pods": claims,
            "modes": modes,
            "rss_ratio_slimmed_to_unslimmed": round(
                slimmed["rss_bytes"] / unslimmed["rss_bytes"], 3
            ),
            "target": {
                "limit_bytes": TARGET_BYTES,
                "measured_bytes": slimmed["peak_rss_bytes"],
                "pass": slimmed["peak_rss_bytes"] <= TARGET_BYTES,
                "at_target_size": at_target,
            },
            "machine": machine(),
        }
    )


if __name__ == "__main__":
    main()
