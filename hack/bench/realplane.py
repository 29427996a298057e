#!/usr/bin/env python3
"""Benchmark the gated path against kube-scheduler alone, on a real Kubernetes control plane.

Real etcd, kube-apiserver, kube-controller-manager and kube-scheduler (v1.36.2 from
../shared/k8s/bin, or the directory GPUSHARE_KUBE_BINARIES names), the chart installed as
``helm template`` renders it, ``gpushare-dra controller`` (with the webhook it serves) running
here under the chart's ServiceAccount token, on a real kubelet's node (``system-0``). N GPU
nodes of 8 H100 80GB cards are Node objects shaped as a kubelet reports them (nobody runs
their pods), each with the ResourceSlices its plugin would publish.

Each path gets the same pods, in a namespace of its own, from one ResourceClaimTemplate
(25 cores, 3Gi): ``scheduler``, pods labelled to opt out of the webhook, so kube-scheduler
allocates their claims itself; ``gated``, pods the webhook gates and the controller places.
Both orders run (scheduler first, then gated first), on one cluster, each phase from an empty
namespace. Per phase: create→ungate and create→bound p50/p99 (a pod's time starts when its
create is sent, so the webhook's review is in), the requests per pod by client and verb
(from the API server's audit log), CPU per pod of every process, and the controller's RSS; and,
from the audit log's timestamps, when each request on a pod's way to its binding finished.

    python hack/bench/realplane.py                        # 100 nodes, 200 pods at 5/s (~6 min)
    python hack/bench/realplane.py --rate 0 --pods 800 --premade   # throughput, claims made first
    python hack/bench/realplane.py --gate-mode webhook    # every gated pod reviewed by the webhook
    python hack/bench/realplane.py --profile /tmp/prof    # py-spy the controller, gated phases
    python hack/bench/realplane.py --smoke                # tiny, for the test suite

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from benchlib import emit, h100_nodes, latency_summary, machine, proc_status_bytes
from gpushare_simulator.harness import kubebin
from gpushare_simulator.harness.chartinstall import ChartInstall
from gpushare_simulator.harness.controlplane import RealControlPlane
from gpushare_simulator.harness.kubeapply import Applier
from gpushare_simulator.harness.lifelike import lifelike_node
from gpushare_simulator.harness.workload import PlannedPod, Tracker, Wave, cpu_seconds
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from realplane_audit import AuditLog, audit_flags

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.k8s import objects, raw
from dra_driver.k8s.objects import Object
from dra_driver.nvml.inventory import Inventory, dump_inventory
from dra_driver.plan.inventory import node_object, node_slices

ROOT: Final = Path(__file__).resolve().parents[2]
CHART: Final = ROOT / "deploy" / "helm" / "gpushare-dra-driver"
HELM: Final = ROOT / ".tools" / "bin" / "helm"
SHARED_BIN: Final = ROOT.parent / "shared" / "k8s" / "bin"
NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
SYSTEM_NODE: Final = "system-0"
PATHS: Final = ("scheduler", "gated")
TEMPLATE: Final = "share"
POLICY_MARK: Final = f"{NAMES.driver}/policy-gate"
"""The annotation the chart's MutatingAdmissionPolicy puts on the pods it gates."""
OPT_OUT: Final = ((f"{NAMES.driver}/webhook", "disabled"),)
"""The chart's webhooks skip pods with this label: kube-scheduler allocates their claims."""
P50_SLACK_MS: Final = 20.0
"""Paced, the gated path's p50 may exceed kube-scheduler's by this much (its p99 by nothing)."""
THROUGHPUT_RATIO: Final = 1.25
"""Unpaced, the gated path must place pods at least this much faster than kube-scheduler."""


def gpu_inventory(nodes: int) -> Inventory:
    """Return ``nodes`` GPU nodes (gpu-0, gpu-1, ...) of 8 H100 80GB cards each."""
    return h100_nodes(nodes, "gpu-")


def claim_template(cores: int, memory: str) -> Object:
    """Return the benchmark's ResourceClaimTemplate: one share of ``cores`` and ``memory``."""
    exactly = {
        "deviceClassName": NAMES.default_device_class,
        "capacity": {"requests": {"cores": str(cores), "memory": memory}},
    }
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE},
        "spec": {"spec": spec},
    }


def _claim(name: str, template: Object) -> Object:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": template["spec"]["spec"],
    }


def kube_binaries() -> kubebin.KubeBinaries:
    """Return the Kubernetes binaries to run (GPUSHARE_KUBE_BINARIES, or ../shared/k8s/bin)."""
    directory = kubebin.source(SHARED_BIN)
    if directory is None or not directory.is_dir():
        raise SystemExit(
            f"no Kubernetes binaries at {directory or SHARED_BIN}: set "
            f"{kubebin.KUBE_BINARIES_ENV} to a "
            "directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler "
            "and klhollow"
        )
    return kubebin.prepare(directory)


class Bench:
    """The cluster of one run and what each phase measures on it."""

    def __init__(self, plane: RealControlPlane, driver: ChartInstall, audit: AuditLog) -> None:
        self.plane, self.driver, self.audit = plane, driver, audit
        self.leading_after_s = 0.0
        """Seconds from the controller's start until it led: its informers listed everything."""
        self.api = plane.api_client()
        self.applier = Applier(self.api)
        self.core = client.CoreV1Api(self.api)
        self.resource = client.ResourceV1Api(self.api)

    def populate(self, inventory: Inventory) -> None:
        """Create the GPU nodes (as a kubelet reports them) and their plugins' slices."""
        for node in inventory.nodes:
            (created,) = self.applier.create([lifelike_node(node_object(node))])
            slices = node_slices(NAMES, node)
            for slice_ in slices:  # owned by the Node the API server made, or collected
                for owner in slice_["metadata"].get("ownerReferences") or []:
                    owner["uid"] = created["metadata"]["uid"]
            self.applier.create(slices)

    def processes(self) -> dict[str, int]:
        """Return the process ID of each control-plane process and of the controller."""
        return {**self.plane.pids(), "controller": self._controller_pid()}

    def admission_seconds(self) -> dict[str, float]:
        """Return kube-apiserver's time in each admission plugin so far (its /metrics), seconds.

        Wall time inside the plugin, mutating and validating steps together: what the policy
        gate (MutatingAdmissionPolicy) and the webhooks cost each request, as the server sees.
        """
        seconds: dict[str, float] = {}
        for family in text_string_to_metric_families(self._fetch("/metrics", 30).decode()):
            if family.name != "apiserver_admission_controller_admission_duration_seconds":
                continue
            for sample in family.samples:
                if sample.name.endswith("_sum"):
                    name = sample.labels["name"]
                    seconds[name] = seconds.get(name, 0.0) + sample.value
        return seconds

    def apiserver_profile(self, out: Path, seconds: float) -> threading.Thread:
        """Start fetching kube-apiserver's CPU profile (Go pprof) for ``seconds`` into ``out``.

        Read it with ``go tool pprof -top out``; kube-apiserver serves it by default.
        """
        path = f"/debug/pprof/profile?seconds={int(seconds)}"

        def fetch() -> None:
            out.write_bytes(self._fetch(path, seconds + 60))

        thread = threading.Thread(target=fetch, name="pprof", daemon=True)
        thread.start()
        return thread

    def _fetch(self, path: str, timeout: float) -> bytes:
        """GET a path of kube-apiserver that is not an API object, as the admin; the body."""
        answer = self.api.rest_client.pool_manager.request(
            "GET", f"{self.plane.url}{path}", headers=self.api.default_headers, timeout=timeout
        )
        body: bytes = answer.data
        return body

    def _controller_pid(self) -> int:
        process = self.driver.processes["controller"].process
        if process is None:
            raise RuntimeError("the controller is not running")
        return process.pid

    def phase(
        self, path: str, namespace: str, pods: int, rate: float, *, premade: bool, timeout: float
    ) -> Object:
        """Run ``pods`` pods down ``path`` in a fresh ``namespace``; return its figures."""
        template = claim_template(25, "3Gi")
        self.applier.create([{"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": namespace}}])  # fmt: skip
        self.applier.create([template], namespace)
        labels = OPT_OUT if path == "scheduler" else ()
        claims = tuple(_claim(f"c-{i}", template) for i in range(pods)) if premade else ()
        planned = tuple(
            PlannedPod(f"p-{i}", claim=f"c-{i}", labels=labels)
            if premade
            else PlannedPod(f"p-{i}", template=TEMPLATE, labels=labels)
            for i in range(pods)
        )
        wave = Wave(planned, claims)
        tracker = Tracker(self.api, NAMES, namespace)
        tracker.start()
        try:
            pids = self.processes()
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            mark = self.audit.mark()
            admission_before = self.admission_seconds()
            tracker.create(wave, None, 1.0 / rate if rate > 0 else 0.0)
            if not tracker.wait("bound", planned, timeout):
                missing = tracker.missing("bound", planned)
                raise TimeoutError(f"{path}: {len(missing)} pods not bound, e.g. {missing[:5]}")
            span = tracker.span("bound", planned)
            time.sleep(2.0)  # writes that follow the binding (events, reservations) count too
            cpu = {n: (cpu_seconds(p) - cpu_before[n]) * 1000 / pods for n, p in pids.items()}
            requests = self.audit.per_pod(mark, pods)
            admission = self.admission_seconds()
            by_plugin = {
                name: round((seconds - admission_before.get(name, 0.0)) * 1000 / pods, 2)
                for name, seconds in sorted(admission.items())
            }
            listed = raw.call(self.core.list_namespaced_pod, namespace)["items"]
            pod_of_claim = {
                claim: objects.name(pod)
                for pod in listed
                for claim in objects.pod_claim_names(pod).values()
                if claim
            }
            figures = {
                "path": path,
                "pods": pods,
                "ungate": latency_summary(tracker.latencies("ungated", planned))
                if path == "gated"
                else None,
                "bound": latency_summary(tracker.latencies("bound", planned)),
                "pods_per_s": round(pods / span, 1) if span else 0.0,
                "cpu_ms_per_pod": {n: round(v, 2) for n, v in sorted(cpu.items())},
                "cpu_ms_per_pod_total": round(sum(cpu.values()), 2),
                "requests_per_pod": requests,
                "timeline_ms": self.audit.timeline(mark, namespace, pod_of_claim),
                "admission_ms_per_pod": {n: v for n, v in by_plugin.items() if v > 0},
                "gated_by_policy": sum(
                    POLICY_MARK in (objects.metadata(p).get("annotations") or {}) for p in listed
                ),
                "controller_rss_mb": _rss_mb(pids["controller"]),
            }
        finally:
            tracker.delete(wave)
            tracker.stop()
        self._drain(namespace)
        return figures

    def _drain(self, namespace: str, timeout: float = 120.0) -> None:
        """Delete the namespace and wait until it is gone: every claim released."""
        raw.call(self.core.delete_namespace, namespace)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            names = [n["metadata"]["name"] for n in raw.call(self.core.list_namespace)["items"]]
            if namespace not in names:
                return
            time.sleep(0.5)
        claims = raw.call(self.resource.list_namespaced_resource_claim, namespace)["items"]
        raise TimeoutError(f"namespace {namespace} not gone: {len(claims)} claims left")


def _rss_mb(pid: int) -> float:
    return round(proc_status_bytes(pid, "VmRSS") / 2**20, 1)


def _profile(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    """Start py-spy sampling ``pid`` for ``seconds``: the thread holding the GIL, i.e. CPU."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    command = [spy, "record", "--pid", str(pid), "--duration", str(int(seconds)),
               "--rate", "200", "--gil", "--format", "speedscope", "--output", str(out),
               "--nonblocking"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _row(order: int, figures: Object) -> str:
    bound, ungate = figures["bound"], figures["ungate"]
    ungated = f"{'-':>7} {'-':>7}"
    if ungate:
        ungated = f"{ungate['p50_ms']:>7.0f} {ungate['p99_ms']:>7.0f}"
    requests = sum(v for by_verb in figures["requests_per_pod"].values() for v in by_verb.values())
    return (
        f"{order:>5} {figures['path']:>9} {ungated} "
        f"{bound['p50_ms']:>7.0f} {bound['p99_ms']:>7.0f} "
        f"{figures['pods_per_s']:>7.1f} {figures['cpu_ms_per_pod_total']:>8.1f} "
        f"{figures['cpu_ms_per_pod'].get('controller', 0.0):>8.1f} {requests:>6.1f} "
        f"{figures['controller_rss_mb']:>7.1f}"
    )


def _verdict(phases: list[Object], rate: float) -> Object:
    """Compare the paths as accepted: the gated path's worse order against the other's best."""
    by_path: dict[str, list[Object]] = {p: [f for f in phases if f["path"] == p] for p in PATHS}
    sched, gated = by_path["scheduler"], by_path["gated"]
    if not sched or not gated:
        return {}
    verdict: Object = {
        "gated_p99_ms": max(f["bound"]["p99_ms"] for f in gated),
        "scheduler_p99_ms": min(f["bound"]["p99_ms"] for f in sched),
        "gated_p50_ms": max(f["bound"]["p50_ms"] for f in gated),
        "scheduler_p50_ms": min(f["bound"]["p50_ms"] for f in sched),
        "gated_cpu_ms": max(f["cpu_ms_per_pod_total"] for f in gated),
        "scheduler_cpu_ms": min(f["cpu_ms_per_pod_total"] for f in sched),
    }
    if rate > 0:
        verdict["p99_pass"] = verdict["gated_p99_ms"] <= verdict["scheduler_p99_ms"]
        slack = P50_SLACK_MS
        verdict["p50_pass"] = verdict["gated_p50_ms"] <= verdict["scheduler_p50_ms"] + slack
    else:
        ratio = min(f["pods_per_s"] for f in gated) / max(f["pods_per_s"] for f in sched)
        verdict["throughput_ratio"] = round(ratio, 2)
        verdict["throughput_pass"] = ratio >= THROUGHPUT_RATIO
    verdict["cpu_pass"] = verdict["gated_cpu_ms"] <= verdict["scheduler_cpu_ms"]
    return verdict


@contextlib.contextmanager
def started(
    work: Path,
    inventory: Inventory,
    fill: Callable[[Bench], None] | None = None,
    *,
    gate_mode: str = "auto",
    profiling: bool = False,
) -> Iterator[Bench]:
    """Yield the cluster of a run once the controller leads.

    The plane starts with an audit log, the chart is installed (``gate.mode``: ``gate_mode``),
    the GPU nodes and their slices are created, ``fill`` runs (before the controller, so its
    start-up reads what it made). ``profiling``: kube-apiserver serves its Go profiles.
    """
    (work / "inventory.yaml").write_text(dump_inventory(inventory))
    values = {
        "controller": {"replicas": 1, "nodeSelector": {"kubernetes.io/hostname": SYSTEM_NODE}},
        "gate": {"enabled": True, "mode": gate_mode},
    }
    audit = AuditLog(work / "audit.log")
    flags = [*audit_flags(work), *(["--profiling=true"] if profiling else [])]
    with RealControlPlane(kube_binaries(), work, apiserver_flags=flags, grace_s=5) as plane:
        plane.add_node(SYSTEM_NODE)
        driver = ChartInstall(plane, HELM, CHART, work / "d", inventory=work / "inventory.yaml",
                              values=values)  # fmt: skip
        driver.install()
        bench = Bench(plane, driver, audit)
        bench.populate(inventory)
        if fill is not None:
            fill(bench)
        began = time.monotonic()
        controller = driver.start_controller()
        try:
            # Leading comes after its informers synced: its start-up is not a pod's cost.
            driver.wait(
                lambda: '"controller.leading"' in controller.log_path.read_text(), "leading", 600
            )
            bench.leading_after_s = time.monotonic() - began
            time.sleep(3.0)
            yield bench
        finally:
            for process in driver.processes.values():
                process.stop(5.0)


def _phases(bench: Bench, args: argparse.Namespace) -> list[Object]:
    """Run every order's phases; print a row for each; return their figures."""
    print(f"{'order':>5} {'path':>9} {'ung p50':>7} {'ung p99':>7} {'bnd p50':>7} "
          f"{'bnd p99':>7} {'pods/s':>7} {'cpu ms':>8} {'ctl ms':>8} {'reqs':>6} "
          f"{'ctl MB':>7}", flush=True)  # fmt: skip
    phases = []
    for number, order in enumerate(args.orders.split(";"), 1):
        for path in order.split(","):
            spy = None
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                out = args.profile / f"controller-{path}-{number}.speedscope.json"
                seconds = args.pods / args.rate + 2 if args.rate else 30
                spy = _profile(bench.processes()["controller"], out, seconds)
                pprof = bench.apiserver_profile(
                    args.profile / f"kube-apiserver-{path}-{number}.pb.gz", seconds
                )
            figures = bench.phase(path, f"{path}-{number}", args.pods, args.rate,
                                  premade=args.premade, timeout=args.timeout)  # fmt: skip
            figures["order"] = number
            phases.append(figures)
            print(_row(number, figures), flush=True)
            if spy is not None:
                spy.wait(timeout=120)
                pprof.join(timeout=120)
    for figures in phases:
        print(f"order {figures['order']}, {figures['path']}: each request on the way to the"
              " binding, finished at (ms after the pod's create, p50 / p99)")  # fmt: skip
        for what, hop in figures["timeline_ms"].items():
            print(f"  {hop['p50_ms']:7.1f} {hop['p99_ms']:7.1f}  {what}")
    return phases


def main(argv: Sequence[str] | None = None) -> None:
    """Start the plane, install the chart, run both paths in both orders, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100, help="GPU nodes of 8 cards")
    parser.add_argument("--pods", type=int, default=200, help="pods per phase")
    parser.add_argument(
        "--rate", type=float, default=5.0, help="pods created per second; 0: at once"
    )
    parser.add_argument("--premade", action="store_true", help="claims made before the pods")
    parser.add_argument("--orders", default="scheduler,gated;gated,scheduler",
                        help="phases, ';' between orders")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per phase")
    parser.add_argument("--gate-mode", choices=("auto", "policy", "webhook"), default="auto",
                        help="the chart's gate.mode: who gates the gated path's pods")  # fmt: skip
    parser.add_argument("--profile", type=Path,
                        help="py-spy the controller, pprof kube-apiserver, each phase")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--smoke", action="store_true", help="tiny, for the test suite")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.pods, args.rate, args.timeout = 2, 4, 20.0, 60.0
    work = Path(tempfile.mkdtemp(prefix="rp", dir="/tmp"))  # short: sockets live under it
    try:
        inventory = gpu_inventory(args.nodes)
        with started(
            work, inventory, gate_mode=args.gate_mode, profiling=bool(args.profile)
        ) as bench:
            phases = _phases(bench, args)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    verdict = _verdict(phases, args.rate)
    emit({"benchmark": "realplane", "machine": machine(), "nodes": args.nodes, "rate": args.rate,
          "premade": args.premade, "gate_mode": args.gate_mode, "phases": phases,
          "acceptance": verdict})  # fmt: skip


if __name__ == "__main__":
    main()
