#!/usr/bin/env python3
"""How long a partition costs: a component's connections black-holed, time until it recovers.

A partition (or a load balancer that lost its state) leaves every connection a component has
open dead but not closed: requests on them are swallowed and no answer or watch event ever
comes, while new connections work. The harness's API server does exactly that to one
component's connections (``blackhole``), and this script times what the component then
takes, with the timeouts the chart sets by default (``--api-timeout 30 --watch-timeout 30``):

* controller (a real process): a pod created right after the partition, until it is bound;
  and a claim whose pod finished right after it, until it is released;
* kubelet plugin (a real process): a pod created right after the partition, until it runs
  (its claim prepared through the plugin); and a ResourceSlice deleted right after it, until
  the plugin has written it again.

Each round starts fresh components. Prints each round, then p50 and max per measure and the
bound the timeouts promise (one watch timeout plus one request timeout, and the time to do
the work itself), then one JSON line.

    python hack/bench/partition.py             # 3 rounds, the default timeouts (~8 minutes)
    python hack/bench/partition.py --smoke     # 1 round, 1 s timeouts, 2 s watches
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import emit, latency_summary, machine
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.podstatus import patch_pod_status
from gpushare_simulator.harness.processes import ComponentProcess, start_controller, start_plugin
from gpushare_simulator.harness.workload import SHARES, PlannedPod, publish_slices, share_template
from kubernetes import client

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.k8s import raw
from dra_driver.k8s.client import USER_AGENT_PREFIX
from dra_driver.k8s.settings import WATCH_GRACE_SECONDS, ApiTimeouts
from dra_driver.logging import configure_logging
from dra_driver.nvml.inventory import Inventory, builtin_inventory, dump_inventory

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NAMESPACE: Final = "default"
WHOLE: Final = next(share for share in SHARES if share.fraction == 1)
_WAIT_SECONDS: Final = 300.0


class Round:
    """One fresh cluster (one node, two cards) and the component under test."""

    def __init__(self, work_dir: Path, timeouts: ApiTimeouts, *, kubelets: bool) -> None:
        node = builtin_inventory("hundred-nodes").nodes[0]
        self.inventory = Inventory(nodes=(node,))
        self.node = node.name
        self.work_dir = work_dir
        self.args = [
            "--api-connect-timeout", str(timeouts.connect),
            "--api-timeout", str(timeouts.request),
            "--watch-timeout", str(timeouts.watch),
        ]  # fmt: skip
        self.cluster = FakeCluster(self.inventory, work_dir, kubelets=kubelets)

    def __enter__(self) -> Round:
        self.cluster.start()
        self.cluster.apply(default_device_classes(NAMES))
        # A whole card asks for no capacity, so the memory figure does not matter.
        self.cluster.apply([share_template(NAMES, WHOLE, 0)], NAMESPACE)
        return self

    def __exit__(self, *_: object) -> None:
        self.cluster.stop()

    def create(self, name: str, *, gated: bool) -> float:
        """Create a pod with one whole card; return when it was created."""
        manifest = PlannedPod(name, template=WHOLE.name).manifest(
            NAMES.scheduling_gate if gated else None
        )
        raw.call(client.CoreV1Api(self.cluster.api).create_namespaced_pod, NAMESPACE, manifest)
        return time.monotonic()

    def pod(self, name: str) -> dict[str, Any]:
        """Read a pod."""
        return raw.call(client.CoreV1Api(self.cluster.api).read_namespaced_pod, name, NAMESPACE)

    def until(self, condition: Callable[[], object], what: str) -> float:
        """Wait for ``condition``; return when it held."""
        self.cluster.wait_for(condition, what, _WAIT_SECONDS)
        return time.monotonic()


def _controller_round(work_dir: Path, timeouts: ApiTimeouts) -> dict[str, float]:
    with Round(work_dir, timeouts, kubelets=False) as run:
        publish_slices(run.cluster, NAMES)
        controller = start_controller(run.cluster, args=["--no-leader-elect", *run.args])
        try:
            controller.wait_ready(60)
            for name in ("first", "second"):
                run.create(name, gated=True)
            run.until(lambda: run.pod("second")["spec"].get("nodeName"), "both cards taken")
            _settle(timeouts)
            run.cluster.server.blackhole(f"{USER_AGENT_PREFIX}controller")
            finished = time.monotonic()
            patch_pod_status(
                client.CoreV1Api(run.cluster.api), run.pod("first"), {"phase": "Succeeded"}
            )
            created = run.create("third", gated=True)
            placed = run.until(
                lambda: run.pod("third")["spec"].get("nodeName"), "the pod after the partition"
            )
            released = run.until(
                lambda: not _claims_of(run, "first"), "the finished pod's claim to go"
            )
        finally:
            _stop(controller)
    return {"controller_next_pod_s": placed - created, "controller_release_s": released - finished}


def _plugin_round(work_dir: Path, timeouts: ApiTimeouts) -> dict[str, float]:
    with Round(work_dir, timeouts, kubelets=True) as run:
        inventory_file = work_dir / "inventory.yaml"
        inventory_file.write_text(dump_inventory(run.inventory))
        plugin = start_plugin(run.cluster, run.node, inventory_file, args=run.args)
        try:
            plugin.wait_ready(60)
            run.until(lambda: _slices(run), "the node's slices")
            run.create("first", gated=False)
            run.until(lambda: _running(run, "first"), "the first pod to run")
            _settle(timeouts)
            run.cluster.server.blackhole(f"{USER_AGENT_PREFIX}kubelet-plugin")
            created = run.create("second", gated=False)
            (name,) = _slices(run)
            raw.call(client.ResourceV1Api(run.cluster.api).delete_resource_slice, name)
            deleted = time.monotonic()
            prepared = run.until(lambda: _running(run, "second"), "the pod after the partition")
            republished = run.until(lambda: _slices(run), "the deleted slice written again")
        finally:
            _stop(plugin)
    return {"plugin_next_pod_s": prepared - created, "plugin_slice_s": republished - deleted}


def _settle(timeouts: ApiTimeouts) -> None:
    """Let the watches sit idle for a while, as they would in a quiet cluster."""
    time.sleep(min(5.0, timeouts.watch / 2))


def _stop(process: ComponentProcess) -> None:
    if process.terminate() != 0:
        print(process.output()[-2000:], file=sys.stderr)


def _claims_of(run: Round, pod: str) -> list[str]:
    listed = raw.call(
        client.ResourceV1Api(run.cluster.api).list_namespaced_resource_claim, NAMESPACE
    )["items"]
    return [
        c["metadata"]["name"]
        for c in listed
        if any(r.get("name") == pod for r in c["metadata"].get("ownerReferences") or [])
    ]


def _slices(run: Round) -> list[str]:
    listed = raw.call(client.ResourceV1Api(run.cluster.api).list_resource_slice)["items"]
    return [s["metadata"]["name"] for s in listed if s["spec"]["driver"] == NAMES.driver]


def _running(run: Round, name: str) -> bool:
    return bool((run.pod(name).get("status") or {}).get("phase") == "Running")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rounds, print them and the summary, end with the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = ApiTimeouts()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--api-connect-timeout", type=float, default=defaults.connect)
    parser.add_argument("--api-timeout", type=float, default=defaults.request)
    parser.add_argument("--watch-timeout", type=int, default=defaults.watch)
    parser.add_argument("--smoke", action="store_true", help="1 round, short timeouts")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.api_connect_timeout, args.api_timeout, args.watch_timeout = 1, 1, 1, 2
    configure_logging(level="error")
    timeouts = ApiTimeouts(
        connect=args.api_connect_timeout, request=args.api_timeout, watch=args.watch_timeout
    )
    # One watch renewal and one request timeout, the rest is the work itself.
    bound = timeouts.watch_read + timeouts.connect + timeouts.request
    print(
        f"timeouts: connect {timeouts.connect:g} s, request {timeouts.request:g} s, watch "
        f"{timeouts.watch} s (+{min(WATCH_GRACE_SECONDS, timeouts.watch):g} s grace); "
        f"bound {bound:g} s plus the work"
    )
    samples: dict[str, list[float]] = {}
    for number in range(1, args.rounds + 1):
        figures: dict[str, float] = {}
        for measure in (_controller_round, _plugin_round):
            with tempfile.TemporaryDirectory(prefix="gsp-", dir="/tmp") as work_dir:
                figures |= measure(Path(work_dir), timeouts)
        for name, seconds in figures.items():
            samples.setdefault(name, []).append(seconds)
        print(f"round {number}: " + ", ".join(f"{k} {v:.1f} s" for k, v in figures.items()))
    summary = {name: latency_summary(values) for name, values in samples.items()}
    for name, figures in summary.items():
        p50, most = figures["p50_ms"] / 1000, figures["max_ms"] / 1000
        print(f"{name:<24} p50 {p50:6.1f} s   max {most:6.1f} s")
    worst = max(max(values) for values in samples.values())
    emit(
        {
            "benchmark": "partition",
            "machine": machine(),
            "rounds": args.rounds,
            "timeouts": {"connect": timeouts.connect, "request": timeouts.request,
                         "watch": timeouts.watch},
            "bound_s": bound,
            "recovery": summary,
            "worst_s": round(worst, 2),
        }
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
