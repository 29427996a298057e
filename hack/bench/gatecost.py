#!/usr/bin/env python3
"""What the chart's gate policy costs kube-apiserver per pod created, on a real control plane.

Only etcd and kube-apiserver run (v1.36.2 from ../shared/k8s/bin, or the directory
GPUSHARE_KUBE_BINARIES names): no kube-scheduler, kube-controller-manager or controller, so
what kube-apiserver spends is the creates themselves and nothing that reacts to them. The
chart's MutatingAdmissionPolicy and its binding are applied as ``helm template`` renders them
(``gate.mode=policy``); the namespace holds one ResourceClaimTemplate, labelled as the webhook
labels a template it lets the policy gate. Pods are sent one after another as compact JSON, as
kubectl sends them.

Four cells, in rounds that alternate whether the policy is bound:

- ``claim``: a pod whose one claim comes from that template: the policy gates it;
- ``plain``: a pod without claims, which the policy's match conditions turn away: what every
  other pod of a cluster pays for the chart being installed.

Per cell: kube-apiserver's and etcd's CPU per pod (from /proc), the create's p50/p99 as the
client saw it, and how many of the pods came back gated. The policy's cost is the difference
between the two cells of a pod shape, median over the rounds.

    python hack/bench/gatecost.py               # 300 pods per cell, 4 rounds (about 2 minutes)
    python hack/bench/gatecost.py --smoke       # tiny, for the test suite

The last line of output is one JSON object with every figure (see hack/bench/benchlib.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Final

from benchlib import emit, latency_summary, machine
from gpushare_simulator.harness import kubebin
from gpushare_simulator.harness.chartinstall import render
from gpushare_simulator.harness.controlplane import RealControlPlane
from gpushare_simulator.harness.kubeapply import Applier
from gpushare_simulator.harness.workload import cpu_seconds
from realplane import CHART, HELM, NAMES, TEMPLATE, claim_template, kube_binaries

from dra_driver.k8s.objects import Object

NAMESPACE: Final = "bench"
POLICY_KINDS: Final = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
SHAPES: Final = ("claim", "plain")
SETTLE_S: Final = 1.0
"""Pause before a cell's first create, so the last cell's deletions are not counted in it."""


def _pod(shape: str) -> bytes:
    """Return a pod of ``shape`` as compact JSON: one container, with the claim or without."""
    container: Object = {"name": "main", "image": "registry.example/cuda:12.4",
                         "command": ["sleep", "infinity"]}  # fmt: skip
    spec: Object = {"containers": [container]}
    if shape == "claim":
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]
    metadata = {"generateName": f"{shape}-", "labels": {"app": "bench"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    return json.dumps(pod, separators=(",", ":")).encode()


def _template() -> Object:
    """Return realplane's template, labelled as the webhook labels one the policy may gate."""
    template = claim_template(25, "3Gi")
    template["metadata"]["labels"] = {NAMES.policy_gate: "true"}
    return template


def _gated(pod: Object) -> bool:
    """Whether the stored ``pod`` carries the driver's scheduling gate."""
    gates = pod["spec"].get("schedulingGates") or []
    return {"name": NAMES.scheduling_gate} in gates


class Bench:
    """The plane of one run: the policy bound or not, pods created and counted."""

    def __init__(self, plane: RealControlPlane, policy: list[Object]) -> None:
        self.plane, self.policy = plane, policy
        self.api = plane.api_client()
        self.applier = Applier(self.api)
        self._http = self.api.rest_client.pool_manager
        self._pods = f"{plane.url}/api/v1/namespaces/{NAMESPACE}/pods"

    def prepare(self) -> None:
        """Create the namespace, its ServiceAccount (no controller manager) and the template."""
        self.applier.create([{"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": NAMESPACE}}])  # fmt: skip
        self.applier.create([{"apiVersion": "v1", "kind": "ServiceAccount",
                              "metadata": {"name": "default"}}], NAMESPACE)  # fmt: skip
        self.applier.create([_template()], NAMESPACE)

    def create(self, body: bytes) -> Object:
        """Create one pod from ``body``; return it as stored."""
        answer = self._http.request(
            "POST", self._pods, body=body, timeout=30.0,
            headers={**self.api.default_headers, "Content-Type": "application/json",
                     "Accept": "application/json"},
        )  # fmt: skip
        if answer.status != HTTPStatus.CREATED:
            raise RuntimeError(f"pod create answered {answer.status}: {answer.data[:300]!r}")
        stored: Object = json.loads(answer.data)
        return stored

    def bind(self, bound: bool) -> None:
        """Apply or delete the policy and its binding; return once pods show it (or not)."""
        for document in self.policy:
            self.applier.delete(document)
            if bound:
                self.applier.create([document])
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            probe = self.create(_pod("claim"))
            self._delete(probe["metadata"]["name"])
            if _gated(probe) == bound:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the policy was {'never' if bound else 'still'} in effect after 60 s")

    def cell(self, shape: str, pods: int) -> Object:
        """Create ``pods`` pods of ``shape``; return CPU per pod and the creates' latency."""
        pids = self.plane.pids()
        body = _pod(shape)
        time.sleep(SETTLE_S)
        cpu = {name: cpu_seconds(pids[name]) for name in ("kube-apiserver", "etcd")}
        seconds: list[float] = []
        stored: list[Object] = []
        for _ in range(pods):
            started = time.perf_counter()
            stored.append(self.create(body))
            seconds.append(time.perf_counter() - started)
        figures: Object = {
            f"{name}_cpu_ms": round((cpu_seconds(pids[name]) - used) * 1000 / pods, 3)
            for name, used in cpu.items()
        }
        figures["create"] = latency_summary(seconds)
        figures["gated"] = sum(_gated(pod) for pod in stored)
        for pod in stored:
            self._delete(pod["metadata"]["name"])
        return figures

    def _delete(self, name: str) -> None:
        self._http.request("DELETE", f"{self._pods}/{name}?gracePeriodSeconds=0",
                           headers=self.api.default_headers, timeout=30.0)  # fmt: skip


def gate_policy() -> list[Object]:
    """Return the chart's gate policy and binding as ``helm template`` renders them."""
    objects = render(HELM, CHART, "bench", "gpushare", {"gate": {"mode": "policy"}})
    policy = [o for kind in POLICY_KINDS for o in objects if o.get("kind") == kind]
    if len(policy) != len(POLICY_KINDS):
        raise RuntimeError(f"the chart rendered no {' and '.join(POLICY_KINDS)}")
    return policy


def run(work: Path, pods: int, rounds: int) -> Object:
    """Start the plane in ``work``, measure every cell ``rounds`` times; return the figures."""
    binaries = kube_binaries()
    only = kubebin.KubeBinaries(
        binaries.source, {name: binaries.path(name) for name in ("etcd", "kube-apiserver")}
    )
    cells: dict[str, list[Object]] = {}
    with RealControlPlane(only, work, grace_s=5) as plane:
        bench = Bench(plane, gate_policy())
        bench.prepare()
        for number in range(rounds):
            for bound in (False, True) if number % 2 == 0 else (True, False):
                bench.bind(bound)
                for shape in SHAPES:
                    key = f"{shape}, {'policy' if bound else 'no policy'}"
                    figures = bench.cell(shape, pods)
                    cells.setdefault(key, []).append(figures)
                    print(f"round {number}  {key:18s}  kube-apiserver "
                          f"{figures['kube-apiserver_cpu_ms']:6.2f} ms/pod  etcd "
                          f"{figures['etcd_cpu_ms']:5.2f}  create p50 "
                          f"{figures['create']['p50_ms']:6.2f} p99 "
                          f"{figures['create']['p99_ms']:6.2f} ms", flush=True)  # fmt: skip
    return {"cells": cells, "summary": _summary(cells)}


def _summary(cells: dict[str, list[Object]]) -> Object:
    """Per pod shape: kube-apiserver's median CPU per pod without and with the policy, compared."""
    summary: Object = {}
    for shape in SHAPES:
        without, with_ = (
            statistics.median(c["kube-apiserver_cpu_ms"] for c in cells[f"{shape}, {key}"])
            for key in ("no policy", "policy")
        )
        summary[shape] = {
            "apiserver_cpu_ms_without": round(without, 3),
            "apiserver_cpu_ms_with": round(with_, 3),
            "policy_cpu_ms": round(with_ - without, 3),
            "ratio": round(with_ / without, 3) if without else None,
        }
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its table and JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=300, help="pods per cell")
    parser.add_argument("--rounds", type=int, default=4, help="rounds (even: both orders)")
    parser.add_argument("--smoke", action="store_true", help="tiny, for the test suite")
    args = parser.parse_args(argv)
    if args.smoke:
        args.pods, args.rounds = 3, 2
    with tempfile.TemporaryDirectory(prefix="gpushare-gatecost-") as work:
        figures = run(Path(work), args.pods, args.rounds)
    for shape, row in figures["summary"].items():
        print(f"{shape:6s} pod: kube-apiserver {row['apiserver_cpu_ms_without']:.2f} ms without "
              f"the policy, {row['apiserver_cpu_ms_with']:.2f} ms with it: "
              f"{row['policy_cpu_ms']:+.2f} ms ({row['ratio']}x)")  # fmt: skip
    emit({"benchmark": "gatecost", "machine": machine(), "pods": args.pods,
          "rounds": args.rounds, **figures})  # fmt: skip


if __name__ == "__main__":
    main()
