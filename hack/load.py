#!/usr/bin/env python3
"""Load run: waves of GPU-share pods created and deleted on 100 nodes x 8 cards, end to end.

The harness (fake API server, resourceclaim controller, scheduler, one emulated kubelet per
node that prepares claims through the node's plugin) with ``gpushare-dra controller`` as a
real process and a kubelet plugin on every node: a few as real processes, the rest in this
process (100 plugin processes are too heavy for 2 cores), so that the controller's and some
plugins' RSS can be read after every wave.

Each wave creates its pods back to back, gated as the webhook would gate them: most name a
ResourceClaimTemplate of a quarter, half or whole card (5:3:2), and a tenth share a named
ResourceClaim, four pods each. It waits until every pod runs, checks the invariants
(``gpushare_simulator.harness.invariants``) under load, deletes every pod and shared claim,
and waits
for the end state: no claim left allocated or with our finalizer, no CDI spec and no
checkpoint entry on any node, every card free again in the controller's own accounting
(its ``gpushare_controller_card_allocated`` metric).

Memory: RSS after each wave's cleanup (and at its peak). The no-leak criterion compares
wave 2 with the last wave (wave 1 grows caches and arenas to their working size): the growth
divided by the pods that passed through in between must stay under ``LEAK_BYTES_PER_POD``
(1 KiB). A pod and its claim as the informers hold them (parsed JSON) take about 13 KiB, so
keeping either for every pod fails it by far; arena noise over a thousand pods stays well
under (tens of KiB in all). Fewer than ``VERDICT_PODS`` pods in between give no verdict
(``passed: null``): one 256 KiB arena step over 60 pods is 4 KiB a pod, noise not a leak.

    python hack/load.py                                 # 5 waves x 400 pods, 100 nodes (~4 min)
    python hack/load.py --waves 3 --pods 60 --nodes 10  # the bounded run of the test suite

The last line of output is one JSON object (see hack/bench/benchlib.py); the exit status is
1 when any check failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import logging
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from dra_driver.k8s import objects

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from benchlib import emit, latency_summary, machine
from gpushare_simulator.harness import invariants
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.endstate import controller_cards_taken, leftovers, wait_clean
from gpushare_simulator.harness.processes import ComponentProcess, start_plugin
from gpushare_simulator.harness.workload import (
    HARNESS_USER_AGENT,
    SHARES,
    Tracker,
    Wave,
    card_memory,
    plan_wave,
    share_template,
    start_leading_controller,
)
from kubernetes import client

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.k8s import raw
from dra_driver.k8s.errors import NotFoundError
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.kubeletplugin import plugin
from dra_driver.kubeletplugin.settings import KubeletPluginSettings
from dra_driver.logging import configure_logging
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.nvml.inventory import Inventory, builtin_inventory, dump_inventory

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NAMESPACE: Final = "default"
LEAK_BYTES_PER_POD: Final = 1024
VERDICT_PODS: Final = 1000
"""Pods between the compared waves below which memory growth is only reported."""
PODS_PER_SHARED_CLAIM: Final = 4
_JOIN_SECONDS: Final = 30.0
_ACCOUNTING_SECONDS: Final = 5.0
_STUCK_SHOWN: Final = 10
"""Pods described when a wave does not run in time: enough to see a pattern."""
_LOG_TAIL_LINES: Final = 30


@dataclasses.dataclass(frozen=True)
class LoadSettings:
    """The size of a run."""

    nodes: int = 100
    waves: int = 5
    pods: int = 400
    """Pods per wave."""
    real_plugins: int = 3
    """Nodes whose plugin runs as its own process (RSS measured)."""
    timeout: float = 300.0
    seed: int = 1


class LoadRun:
    """One run: :meth:`run` returns the report; everything is stopped and removed after."""

    def __init__(self, settings: LoadSettings, work_dir: Path) -> None:
        self.settings = settings
        self.work_dir = work_dir
        full = builtin_inventory("hundred-nodes")
        self.inventory = dataclasses.replace(full, nodes=full.nodes[: settings.nodes])
        self.cluster = FakeCluster(self.inventory, work_dir)
        self.rng = random.Random(settings.seed)  # noqa: S311 - reproducible runs, not secrets
        self.plugins: dict[str, ComponentProcess] = {}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.metrics_port = _free_port()

    def run(self) -> dict[str, Any]:
        """Start, run every wave, stop; return the figures."""
        started = time.monotonic()
        controller = None
        try:
            self.cluster.start()
            self._setup()
            controller = start_leading_controller(self.cluster, NAMES, self.metrics_port)
            tracker = Tracker(self.cluster.api, NAMES, NAMESPACE)
            tracker.start()
            try:
                waves = [self._wave(i, tracker, controller) for i in range(self.settings.waves)]
            finally:
                tracker.stop()
        finally:
            if controller is not None:
                controller.terminate()
            self._stop_plugins()
            self.cluster.stop()
        memory = _memory(waves)
        return {
            "waves": waves,
            "memory": memory,
            "passed": all(w["passed"] for w in waves) and memory["passed"] is not False,
            "seconds": round(time.monotonic() - started, 1),
        }

    # -- setup ---------------------------------------------------------------------------

    def _setup(self) -> None:
        self.cluster.api.user_agent = HARNESS_USER_AGENT
        self.cluster.apply(default_device_classes(NAMES))
        memory = card_memory(self.cluster)
        self.cluster.apply(share_template(NAMES, share, memory) for share in SHARES)
        kube = KubeClientSettings(kubeconfig=str(self.cluster.kubeconfig()))
        for index, node in enumerate(self.inventory.nodes):
            # One file per node, as each real node sees only its cards: a fake card source
            # parses its whole file every few seconds, and 100 nodes' worth in each of 100
            # plugins would take more CPU than the machine has.
            inventory_file = self.work_dir / f"inventory-{node.name}.yaml"
            inventory_file.write_text(dump_inventory(Inventory(nodes=(node,))))
            if index < self.settings.real_plugins:
                self.plugins[node.name] = start_plugin(self.cluster, node.name, inventory_file)
            else:
                self._start_thread(node.name, inventory_file, kube)
        for process in self.plugins.values():
            process.wait_ready(60)
        self.cluster.wait_for(self._all_published, "every node's slices", 120)

    def _start_thread(self, node: str, inventory_file: Path, kube: KubeClientSettings) -> None:
        dirs = self.cluster.node_dirs(node)
        settings = KubeletPluginSettings(
            node_name=node,
            gpu_inventory=inventory_file,
            plugin_registry_dir=dirs.registry,
            plugin_dir=dirs.plugins / NAMES.driver,
            cdi_root=dirs.cdi,
        )
        observability = ObservabilitySettings(metrics_port=-1)
        thread = threading.Thread(
            target=plugin.run,
            args=(NAMES, settings, kube, observability, self._stop),
            name=f"plugin-{node}",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()

    def _all_published(self) -> bool:
        if not all(NAMES.driver in k.plugins for k in self.cluster.emulated.values()):
            return False
        listed = raw.call(client.ResourceV1Api(self.cluster.api).list_resource_slice)["items"]
        return {s["spec"].get("nodeName") for s in listed} >= set(self.cluster.kubelets)

    def _stop_plugins(self) -> None:
        for process in self.plugins.values():
            process.terminate()
        self._stop.set()
        for thread in self._threads:
            thread.join(_JOIN_SECONDS)

    # -- one wave ------------------------------------------------------------------------

    def _wave(self, index: int, tracker: Tracker, controller: ComponentProcess) -> dict[str, Any]:
        settings = self.settings
        shared = settings.pods // 10 // PODS_PER_SHARED_CLAIM
        wave = plan_wave(
            NAMES,
            self.rng,
            f"w{index}",
            settings.pods,
            card_memory(self.cluster),
            shared_claims=shared,
            pods_per_claim=PODS_PER_SHARED_CLAIM,
        )
        tracker.create(wave, NAMES.scheduling_gate)
        ran = tracker.wait("running", wave.pods, settings.timeout)
        figures = self._figures(wave, tracker)
        if not ran:
            figures["stuck"] = self._stuck(tracker.missing("running", wave.pods), controller)
        figures["violations_under_load"] = invariants.check(self.cluster, NAMES)
        figures["rss_at_peak"] = self._rss(controller)
        deleting = time.monotonic()
        tracker.delete(wave)
        left, _ = wait_clean(lambda: leftovers(self.cluster, NAMES), settings.timeout)
        figures["cleanup_s"] = round(time.monotonic() - deleting, 1)
        figures["leftovers"] = left[:20]
        figures["leftover_count"] = len(left)
        if left:
            figures["stuck_cleanup"] = self._controller_state(controller, stacks=True)
        # Released claims are gone from the API by now; the controller has seen it at once.
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        nodes = len(self.inventory.nodes)
        taken, _ = wait_clean(lambda: controller_cards_taken(url, nodes), _ACCOUNTING_SECONDS)
        figures["controller_cards_taken"] = len(taken)
        figures["rss"] = self._rss(controller)
        figures["passed"] = (
            figures["running"] == figures["created"]
            and not left
            and not taken
            and not figures["violations_under_load"]
        )
        print(_row(index + 1, figures), flush=True)
        return figures

    def _figures(self, wave: Wave, tracker: Tracker) -> dict[str, Any]:
        created = len(wave.pods)
        allocated = tracker.count("allocated", wave.pods)
        return {
            "created": created,
            "shared_claims": len(wave.claims),
            "allocated": allocated,
            "success_rate": round(allocated / created, 4),
            "running": tracker.count("running", wave.pods),
            "seconds_to_running": round(tracker.span("running", wave.pods), 1),
            "latency_allocated": latency_summary(tracker.latencies("allocated", wave.pods)),
            "latency_running": latency_summary(tracker.latencies("running", wave.pods)),
        }

    def _stuck(self, names: list[str], controller: ComponentProcess) -> dict[str, Any]:
        """Say where the first pods that did not run are held, and what the controller said."""
        core = client.CoreV1Api(self.cluster.api)
        events = raw.call(core.list_namespaced_event, NAMESPACE)["items"]
        pods: list[dict[str, Any]] = []
        for name in names[:_STUCK_SHOWN]:
            try:
                pod = raw.call(core.read_namespaced_pod, name, NAMESPACE)
            except NotFoundError:
                pods.append({"name": name, "state": "gone"})
                continue
            said = [e for e in events if e["involvedObject"].get("name") == name]
            last: dict[str, Any] = max(said, key=lambda e: e.get("lastTimestamp") or "", default={})
            pods.append({
                "name": name,
                "gates": [g["name"] for g in pod["spec"].get("schedulingGates") or []],
                "node": pod["spec"].get("nodeName"),
                "phase": objects.status(pod).get("phase"),
                "last_event": f"{last.get('reason')}: {last.get('message')}" if last else None,
            })  # fmt: skip
        return {"count": len(names), "pods": pods, **self._controller_state(controller)}

    def _controller_state(
        self, controller: ComponentProcess, *, stacks: bool = False
    ) -> dict[str, Any]:
        """Whether the controller runs, its last log lines and, if asked, its threads' stacks."""
        alive = controller.process.poll() is None
        state: dict[str, Any] = {
            "controller": "running" if alive else f"exited {controller.process.returncode}",
            "controller_log_tail": controller.output().splitlines()[-_LOG_TAIL_LINES:],
        }
        if stacks:
            state["controller_stacks"] = controller.stacks().splitlines()
        return state

    def _rss(self, controller: ComponentProcess) -> dict[str, int]:
        sampled = {"controller": controller.rss_bytes()}
        sampled |= {f"plugin/{node}": p.rss_bytes() for node, p in self.plugins.items()}
        return sampled


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _memory(waves: list[dict[str, Any]]) -> dict[str, Any]:
    """Growth from wave 2 to the last wave per process, against the per-pod threshold."""
    if len(waves) < 3:  # noqa: PLR2004 - wave 1 warms up; two more are needed for a trend
        return {"passed": True, "compared": None}
    second, last = waves[1]["rss"], waves[-1]["rss"]
    pods = sum(w["created"] for w in waves[2:])
    growth = {name: last[name] - second[name] for name in second}
    per_pod = {name: round(bytes_ / pods, 1) for name, bytes_ in growth.items()}
    within = all(value <= LEAK_BYTES_PER_POD for value in per_pod.values())
    return {
        "compared": [2, len(waves)],
        "pods_between": pods,
        "growth_bytes": growth,
        "growth_bytes_per_pod": per_pod,
        "threshold_bytes_per_pod": LEAK_BYTES_PER_POD,
        "passed": within if pods >= VERDICT_PODS else None,
    }


def _row(number: int, figures: dict[str, Any]) -> str:
    mib = figures["rss"]["controller"] / 2**20
    return (
        f"{number:>4} {figures['created']:>7} {figures['allocated']:>9} "
        f"{figures['running']:>7} {figures['seconds_to_running']:>9.1f} "
        f"{figures['cleanup_s']:>9.1f} {figures['leftover_count']:>9} "
        f"{figures['controller_cards_taken']:>9} {mib:>10.1f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the waves, print a table and the JSON line; exit 1 unless every check passed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = LoadSettings()
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--waves", type=int, default=defaults.waves)
    parser.add_argument("--pods", type=int, default=defaults.pods, help="pods per wave")
    parser.add_argument("--real-plugins", type=int, default=defaults.real_plugins)
    parser.add_argument("--timeout", type=float, default=defaults.timeout, help="per wait")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--work-root",
        type=Path,
        default="/tmp",  # noqa: S108 - short, for unix socket paths; mkdtemp makes it private
        help="where the run's directory is made (short: unix sockets live in it)",
    )
    args = parser.parse_args(argv)
    configure_logging(level="warning")  # the harness's actors narrate every step at debug
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    settings = LoadSettings(
        nodes=args.nodes,
        waves=args.waves,
        pods=args.pods,
        real_plugins=args.real_plugins,
        timeout=args.timeout,
        seed=args.seed,
    )
    print(
        f"{settings.nodes} nodes x 8 cards, {settings.waves} waves x {settings.pods} pods\n"
        f"{'wave':>4} {'created':>7} {'allocated':>9} {'running':>7} {'to run s':>9} "
        f"{'cleanup s':>9} {'leftovers':>9} {'ctl taken':>9} {'ctl MiB':>10}"
    )
    # Unix socket paths must stay under 108 bytes: a short directory.
    work_dir = Path(tempfile.mkdtemp(prefix="gpushare-load-", dir=args.work_root))
    # A run far past its waits is hung somewhere no timeout covers: say where, on stderr.
    faulthandler.dump_traceback_later(settings.waves * settings.timeout * 2 + 30, exit=False)
    try:
        report = LoadRun(settings, work_dir).run()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    emit({"benchmark": "load", "machine": machine(), **dataclasses.asdict(settings), **report})
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
