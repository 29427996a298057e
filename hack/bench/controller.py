#!/usr/bin/env python3
"""Benchmark the allocation controller end to end: gated pods in, allocated claims out.

The harness (fake API server, resourceclaim controller, scheduler; no kubelets) with the
built-in ``hundred-nodes`` inventory (100 nodes x 8 H100 80GB), the chart's DeviceClasses and
the slices each node's plugin would publish. ``gpushare-dra controller`` runs as a real
process. N pods are created back to back, each carrying the scheduling gate the webhook would
add and naming a ResourceClaimTemplate of a quarter, a half or a whole card (5:3:2).

Then the same pods, ungated, on a fresh cluster without the controller: the harness scheduler
allocates them first-fit, as kube-scheduler does without the webhook.

A pod counts as allocated when a watch shows every claim of it with ``status.allocation``, in
both runs; latency runs from the return of its create call. Also reported: until the gate
was removed (controller run) and until the pod was bound. Requests are what the fake API
server served between the first create and the last allocation, per allocated pod, in all
and for the driver alone (every client but the harness's own).

After the controller run, ``gpushare-dra webhook`` starts against the same cluster and is sent
one pod review per pod, each the pod as created (without the gate), over one kept-alive HTTPS
connection as kube-apiserver sends them; its own latency histogram gives the mean and the
bucket that holds p50 and p99 (``webhook_pod_reviews``).

    python hack/bench/controller.py               # 400 pods on 100 nodes (about 2 minutes)
    python hack/bench/controller.py --pods 800 --timeout 900  # over 10 minutes, see below
    python hack/bench/controller.py --smoke       # tiny, for the test suite

The harness scheduler's first-fit run is what bounds the size: it rebuilds the allocated
state for every node it tries, so its cost per pod grows with the pods already placed (400
pods: about 90 s; 800: over 8 minutes, against under a minute for the controller).

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import logging
import random
import ssl
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final

from benchlib import emit, latency_summary, machine
from gpushare_simulator.harness.apiserver.app import WRITE_VERBS, LoggedRequest
from gpushare_simulator.harness.apiserver.routing import RequestInfo
from gpushare_simulator.harness.certs import write_self_signed
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.processes import ComponentProcess, logged_port, start_webhook
from gpushare_simulator.harness.workload import (
    HARNESS_USER_AGENT,
    SHARES,
    Tracker,
    Wave,
    card_memory,
    cpu_seconds,
    plan_wave,
    publish_slices,
    share_template,
    start_leading_controller,
)
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.logging import configure_logging
from dra_driver.nvml.inventory import Inventory, builtin_inventory

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NAMESPACE: Final = "default"
MODES: Final = ("controller", "firstfit")


def _critical_path(
    log: Sequence[LoggedRequest], tracker: Tracker, names: Sequence[str]
) -> dict[str, Any]:
    """Count the driver's sequential requests about each pod (or its claims), create to ungate.

    Requests in flight at the same time are one round trip: the count is the longest chain of
    requests each sent after the one before it was answered. List and watch requests name no
    object and are not counted: they are not on any pod's path.
    """
    counts: list[int] = []
    sequences: dict[int, list[str]] = {}
    for name in names:
        times = tracker.times.get(name)
        if times is None or times.ungated is None:
            continue
        created, ungated = times.created, times.ungated
        path = [
            r
            for r in log
            if r.agent != HARNESS_USER_AGENT
            and created <= r.at <= ungated
            and (r.name == name or r.name.startswith(f"{name}-"))
        ]
        trips = _round_trips(path)
        counts.append(trips)
        sequences.setdefault(trips, [f"{r.verb} {r.resource}" for r in path])
    if not counts:
        return {"pods": 0}
    ordered = sorted(counts)
    median = ordered[len(ordered) // 2]
    return {
        "pods": len(counts),
        "p50": median,
        "max": ordered[-1],
        "median_sequence": sequences[median],
    }


def _round_trips(requests: Sequence[LoggedRequest]) -> int:
    """Return the most requests of ``requests`` that ran one after another, none overlapping."""
    chain, free_from = 0, float("-inf")
    for request in sorted(requests, key=lambda r: r.done if r.done is not None else r.at):
        if request.at >= free_from:
            chain += 1
            free_from = request.done if request.done is not None else request.at
    return chain


def _is_write(request: RequestInfo) -> bool:
    """Whether the request changes what the API server stores (a real one commits to etcd)."""
    return request.verb in WRITE_VERBS


def _per_pod(counter: Mapping[tuple[str, str, str], int], pods: int) -> dict[str, dict[str, float]]:
    """Return the requests per allocated pod by client (User-Agent) and ``verb resource``."""
    table: dict[str, dict[str, float]] = {}
    for (agent, verb, resource), count in sorted(counter.items()):
        table.setdefault(agent or "(none)", {})[f"{verb} {resource}"] = round(count / pods, 2)
    return table


def run_mode(
    mode: str,
    inventory: Inventory,
    pods: int,
    seed: int,
    timeout: float,
    *,
    rate: float = 0.0,
    write_latency: float = 0.0,
) -> dict[str, Any]:
    """Run one mode on a fresh cluster and return its figures.

    ``rate``: pods/s, 0 for all at once; ``write_latency``: seconds every write waits before
    the API server carries it out, as etcd's commit makes a real one wait.
    """
    with (
        tempfile.TemporaryDirectory(prefix="gpushare-bench-") as work,
        FakeCluster(inventory, Path(work), kubelets=False) as cluster,
    ):
        cluster.api.user_agent = HARNESS_USER_AGENT
        if write_latency > 0:
            cluster.server.faults.inject(when=_is_write, delay=write_latency)
        cluster.apply(default_device_classes(NAMES))
        publish_slices(cluster, NAMES)
        memory = card_memory(cluster)
        cluster.apply(share_template(NAMES, share, memory) for share in SHARES)
        webhook = None
        controller = (
            # Leader-elected, as the chart deploys it: allocation and finalizer go together.
            start_leading_controller(cluster, NAMES, elect=True) if mode == "controller" else None
        )
        tracker = Tracker(cluster.api, NAMES, NAMESPACE)
        tracker.start()
        wave = plan_wave(NAMES, random.Random(seed), "bench", pods, memory)  # noqa: S311
        busy = _Busy(controller.pid if controller else None)
        try:
            cluster.server.reset_requests()
            log = cluster.server.record_requests()
            interval = 1.0 / rate if rate > 0 else 0.0
            tracker.create(wave, NAMES.scheduling_gate if controller else None, interval)
            tracker.wait("allocated", wave.pods, timeout)
            cpu = busy.since_start()
            by_resource = dict(cluster.server.requests)
            by_agent = dict(cluster.server.requests_by_agent)
            tracker.wait("bound", wave.pods, timeout)
            # After binding: every pod's whole path, its ungating included.
            by_agent_verb = dict(cluster.server.requests_by_agent_verb)
            bound_by_agent = dict(cluster.server.requests_by_agent)
            rss = controller.rss_bytes() if controller else 0
            critical = _critical_path(list(log), tracker, [p.name for p in wave.pods])
            reviews: dict[str, float] = {}
            if controller is not None:  # started only now: it must not compete with the run
                webhook = _start_webhook(cluster, Path(work))
                reviews = _review_each(webhook[1], webhook[2], wave)
        finally:
            tracker.stop()
            if controller is not None:
                controller.terminate()
            if webhook is not None:
                webhook[0].terminate()
    allocated = tracker.count("allocated", wave.pods)
    seconds = tracker.span("allocated", wave.pods)
    total = sum(by_agent.values())
    # The driver's requests once every pod is bound: a gate may come off after the last
    # allocation is seen, and is the driver's request all the same.
    driver = sum(bound_by_agent.values()) - bound_by_agent.get(HARNESS_USER_AGENT, 0)
    return {
        "pods": pods,
        "allocated": allocated,
        "bound": tracker.count("bound", wave.pods),
        "seconds": round(seconds, 3),
        "pods_per_s": round(allocated / seconds, 2) if seconds else 0.0,
        "latency_allocated": latency_summary(tracker.latencies("allocated", wave.pods)),
        "latency_ungated": latency_summary(
            tracker.latencies("ungated", wave.pods) if controller else []
        ),
        "latency_bound": latency_summary(tracker.latencies("bound", wave.pods)),
        "requests": {
            "total": total,
            "per_allocation": round(total / allocated, 2) if allocated else 0.0,
            "driver_per_allocation": round(driver / allocated, 2) if allocated else 0.0,
            "by_verb_resource": {f"{v} {r}": n for (v, r), n in sorted(by_resource.items())},
            "per_pod_by_client": _per_pod(by_agent_verb, allocated) if allocated else {},
            "driver_round_trips_create_to_ungate": critical,
        },
        "cpu_ms_per_pod": {
            part: round(seconds * 1000 / allocated, 1) if allocated else 0.0
            for part, seconds in cpu.items()
        },
        "cpu_s": cpu,
        "controller_rss_bytes": rss,
        "webhook_pod_reviews": reviews,
    }


def _start_webhook(cluster: FakeCluster, work: Path) -> tuple[ComponentProcess, int, Path]:
    """Start ``gpushare-dra webhook`` against the cluster; return it, its port and its CA.

    It is not registered with the API server: the harness's webhook client opens a TLS
    connection per call, where kube-apiserver keeps them open, so in the path it would add
    the harness's cost to the gated pods. Its reviews are timed apart (:func:`_review_each`).
    """
    cert, key = write_self_signed(work)
    webhook = start_webhook(cluster, cert_file=cert, key_file=key, names=NAMES)
    webhook.wait_ready(60)
    port = logged_port(webhook, "webhook.started")
    deadline = time.monotonic() + 60
    while _get(port, cert, "/readyz")[0] != HTTPStatus.OK:  # its informers have synced
        if time.monotonic() > deadline:
            raise TimeoutError(f"the webhook did not become ready:\n{webhook.output()}")
        time.sleep(0.1)
    return webhook, port, cert


def _review_each(port: int, ca: Path, wave: Wave) -> dict[str, float]:
    """Send the webhook one pod review per pod of the wave, as kube-apiserver would.

    One kept-alive HTTPS connection, as kube-apiserver's; each review is the pod as created,
    without the gate, so the webhook does its full work (look up the claims, gate the pod).
    """
    context = ssl.create_default_context(cafile=str(ca))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        for pod in wave.pods:
            review = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": str(uuid.uuid4()),
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": NAMESPACE,
                    "name": pod.name,
                    "operation": "CREATE",
                    "userInfo": {"username": "bench"},
                    "object": pod.manifest(None),
                    "dryRun": False,
                },
            }
            body = json.dumps(review).encode()
            connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            if answer.status != HTTPStatus.OK:
                raise RuntimeError(f"the webhook answered {answer.status} for pod {pod.name}")
    finally:
        connection.close()
    return _review_times(port, ca)


def _get(port: int, ca: Path, path: str) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}{path}", timeout=5, context=context
        ) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except OSError:
        return 0, ""


def _review_times(port: int, ca: Path) -> dict[str, float]:
    """Return the webhook's own time per pod review, from its latency histogram.

    A quantile is reported as the upper bound of the bucket that holds it (``p99_at_most``);
    the mean is exact (the histogram's sum over its count).
    """
    _, text = _get(port, ca, "/metrics")
    buckets: list[tuple[float, float]] = []
    count = total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "gpushare_webhook_request_duration_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("kind") != "Pod" or sample.labels.get("operation") != "mutate":
                continue
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
    buckets.sort()

    def bound_of(q: float) -> float:
        """Return the upper bound of the bucket holding quantile ``q``."""
        for bound, cumulative in buckets:
            if cumulative >= q * count:
                return bound * 1000
        return float("inf")

    if not count:
        return {"reviews": 0.0}
    return {
        "reviews": count,
        "mean_ms": round(total / count * 1000, 3),
        "p50_at_most_ms": bound_of(0.5),
        "p99_at_most_ms": bound_of(0.99),
    }


class _Busy:
    """CPU seconds of this process (API server and harness) and of the controller process."""

    def __init__(self, controller: int | None) -> None:
        self._controller = controller
        self._start = self._now()

    def _now(self) -> tuple[float, float]:
        theirs = cpu_seconds(self._controller) if self._controller else 0.0
        return time.process_time(), theirs

    def since_start(self) -> dict[str, float]:
        """Return the CPU seconds each used since this object was made."""
        now = self._now()
        return {
            "harness": round(now[0] - self._start[0], 1),
            "controller": round(now[1] - self._start[1], 1),
        }


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def _row(mode: str, result: dict[str, Any]) -> str:
    latency = result["latency_allocated"]
    return (
        f"{mode:>10} {result['allocated']:>5}/{result['pods']:<5} {result['pods_per_s']:>8.1f} "
        f"{latency['p50_ms']:>9.1f} {latency['p99_ms']:>9.1f} {latency['max_ms']:>9.1f} "
        f"{result['requests']['per_allocation']:>8.2f} "
        f"{result['requests']['driver_per_allocation']:>8.2f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Run both modes, print a table, then the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=400, help="pods created at once")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="paced mode: create the pods at this many per second (below saturation) instead "
        "of all at once",
    )
    parser.add_argument(
        "--write-latency-ms",
        type=float,
        default=0.0,
        help="hold every write this long before the API server carries it out (a real one "
        "commits each write to etcd first; the harness answers in about a millisecond)",
    )
    parser.add_argument("--nodes", type=int, default=100, help="nodes of hundred-nodes used")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per wait")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    args = parser.parse_args(argv)
    configure_logging(level="warning")  # the harness's actors narrate every step at debug
    # Its many informers outnumber the harness client's connection pool; harmless here.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    if args.smoke:
        args.pods, args.nodes, args.timeout = 40, 4, 60.0
    full = builtin_inventory("hundred-nodes")
    inventory = dataclasses.replace(full, nodes=full.nodes[: args.nodes])
    started = time.monotonic()
    print(
        f"{len(inventory.nodes)} nodes x 8 cards, {args.pods} pods (quarter:half:whole 5:3:2)\n"
        f"{'mode':>10} {'allocated':>11} {'pods/s':>8} {'p50 ms':>9} {'p99 ms':>9} "
        f"{'max ms':>9} {'req/pod':>8} {'drv/pod':>8}"
    )
    results = {}
    for mode in MODES:
        results[mode] = run_mode(
            mode,
            inventory,
            args.pods,
            args.seed,
            args.timeout,
            rate=args.rate,
            write_latency=args.write_latency_ms / 1000,
        )
        print(_row(mode, results[mode]), flush=True)
    ours, baseline = results["controller"], results["firstfit"]
    emit(
        {
            "benchmark": "controller",
            "machine": machine(),
            "nodes": len(inventory.nodes),
            "rate_pods_per_s": args.rate or None,
            "write_latency_ms": args.write_latency_ms,
            "cards": sum(len(n.cards) for n in inventory.nodes),
            "modes": results,
            "controller_vs_firstfit": {
                "throughput": _ratio(ours["pods_per_s"], baseline["pods_per_s"]),
                "p50": _ratio(
                    ours["latency_allocated"]["p50_ms"], baseline["latency_allocated"]["p50_ms"]
                ),
                "p99": _ratio(
                    ours["latency_allocated"]["p99_ms"], baseline["latency_allocated"]["p99_ms"]
                ),
            },
            "wall_s": round(time.monotonic() - started, 1),
        }
    )


if __name__ == "__main__":
    main()
