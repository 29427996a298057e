"""GpuShareQuota held through the controller: two replicas, lagging watches, crashes, releases.

Two replicas without leader election (the hardest case: only the second-pass check stands
between them), each with its own watch position; Hypothesis picks the interleaving of
decisions, releases, pod deletions, replica restarts and watch progress. At no moment may the
claims the controller committed (the only ones a pod runs on) take the quota over ``hard``.
"""

from __future__ import annotations

import contextlib
from fractions import Fraction
from typing import Any

import yaml
from controller.interleave import Server, claim_obj, make, pod_obj
from controller.kit import NAMES, node
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dra_driver.controller.allocator import Allocator
from dra_driver.controller.releaser import Releaser
from dra_driver.k8s.errors import ConflictError
from dra_driver.k8s.reconcile import Requeue

Object = dict[str, Any]
Step = tuple[str, int, str]

HARD_CORES = 100
QUOTA = f"""
apiVersion: {NAMES.driver}/v1alpha1
kind: GpuShareQuota
metadata: {{name: gpu, namespace: default}}
spec:
  hard: {{cores: "{HARD_CORES}"}}
"""
# Four 40-core shares on a node of four cards: the cards hold them all, the quota two.
PODS = {f"p{name}": name for name in ("w", "x", "y", "z")}


class Replicas:
    """One API server, two replicas, one change log; each replica's watch at its own place."""

    def __init__(self) -> None:
        self.servers: list[Server] = []
        self.allocators: list[Allocator] = []
        self.releasers: list[Releaser] = []
        self.cursors = [0, 0]
        self.log: list[tuple[str, Object]] = []
        for _ in range(2):
            self._add_replica()
        self.servers[1].objs = self.servers[0].objs
        api = self.servers[0]
        api.put("quotas", yaml.safe_load(QUOTA), deliver=False)
        for pod, claim in PODS.items():
            api.put("claims", claim_obj(claim, "40", "1Gi"), deliver=False)
            api.put("pods", pod_obj(pod, claim), deliver=False)
        self.collect()

    def _add_replica(self) -> None:
        _, server, allocator, releaser, _ = make(node("n", 4))
        self.servers.append(server)
        self.allocators.append(allocator)
        self.releasers.append(releaser)

    def collect(self) -> None:
        """Move what the replicas wrote into the change log, in resourceVersion order."""
        for server in self.servers:
            self.log.extend(server.pending)
            server.pending = []
        self.log.sort(key=lambda change: int(change[1]["metadata"]["resourceVersion"]))

    def step(self, step: Step) -> None:
        """Run one step of a replica: a pass, its watch moving on, a restart, a deletion."""
        action, replica, what = step
        if action == "watch":
            start = self.cursors[replica]
            self.cursors[replica] = min(len(self.log), start + int(what))
            self.servers[replica].deliver(self.log[start : self.cursors[replica]])
            return
        if action == "restart":  # a new process: fresh caches, listed from the API server
            _, server, allocator, releaser, _ = make(node("n", 4))
            server.objs = self.servers[0].objs
            server.deliver([(kind, obj) for (kind, *_), obj in server.objs.items()])
            self.servers[replica] = server
            self.allocators[replica], self.releasers[replica] = allocator, releaser
            self.cursors[replica] = len(self.log)
            return
        if action == "delete":  # the pod ends: its claim is the releasers' to free
            self.servers[0].objs.pop(("pods", "default", what), None)
            return
        with contextlib.suppress(Requeue, ConflictError, KeyError):
            if action == "allocate":
                self.allocators[replica].reconcile(("default", what))
            else:
                self.releasers[replica].reconcile(("default", PODS[what]))
        self.collect()

    def committed_cores(self) -> Fraction:
        """Cores of the claims the controller committed: the ones pods may run on."""
        total = Fraction(0)
        for (kind, *_), claim in self.servers[0].objs.items():
            finalizers = claim["metadata"].get("finalizers") or []
            allocation = (claim.get("status") or {}).get("allocation")
            if kind == "claims" and allocation and NAMES.finalizer in finalizers:
                for result in allocation["devices"]["results"]:
                    total += Fraction((result.get("consumedCapacity") or {}).get("cores", "0"))
        return total

    def ungated_on_uncommitted(self) -> list[str]:
        """Pods free to run whose claim the controller has not committed."""
        found = []
        for (kind, _, name), pod in self.servers[0].objs.items():
            if kind != "pods" or pod["spec"].get("schedulingGates"):
                continue
            claim = self.servers[0].objs[("claims", "default", PODS[name])]
            if NAMES.finalizer not in (claim["metadata"].get("finalizers") or []):
                found.append(name)
        return found


_replica = st.integers(0, 1)
_pod = st.sampled_from(sorted(PODS))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), _replica, _pod),
        st.tuples(st.just("release"), _replica, _pod),
        st.tuples(st.just("watch"), _replica, st.sampled_from(["1", "2", "4"])),
        st.tuples(st.just("delete"), st.just(0), _pod),
        st.tuples(st.just("restart"), _replica, st.just("")),
    ),
    max_size=40,
)


def _race() -> list[Step]:
    """Both replicas write before either sees the other, then both check."""
    return [
        ("allocate", 0, "pw"),
        ("allocate", 0, "px"),
        ("allocate", 1, "py"),
        ("allocate", 1, "pz"),
        ("watch", 0, "4"),
        ("watch", 1, "4"),
        ("watch", 0, "4"),
        ("watch", 1, "4"),
        ("allocate", 0, "pw"),
        ("allocate", 0, "px"),
        ("allocate", 1, "py"),
        ("allocate", 1, "pz"),
    ]


@settings(max_examples=150, deadline=None)
@given(_steps)
@example(_race())
def test_no_interleaving_takes_the_quota_over_hard_through_the_controller(
    steps: list[Step],
) -> None:
    """After every step: committed claims within hard, and no pod runs on an unchecked claim."""
    replicas = Replicas()
    for step in steps:
        replicas.step(step)
        assert replicas.committed_cores() <= HARD_CORES, step
        assert replicas.ungated_on_uncommitted() == [], step


def test_the_race_ends_with_two_pods_running_and_two_waiting() -> None:
    """Four writes past the quota: the checks clear what is over, and settling places two."""
    replicas = Replicas()
    for step in _race():
        replicas.step(step)
    for _ in range(4):
        for replica in (0, 1):
            replicas.step(("watch", replica, "64"))
        for pod in sorted(PODS):
            replicas.step(("allocate", 0, pod))
    running = [
        name
        for (kind, _, name), pod in replicas.servers[0].objs.items()
        if kind == "pods" and not pod["spec"].get("schedulingGates")
    ]
    assert len(running) == 2
    assert replicas.committed_cores() == 80  # two 40-core shares; a third would be 120
