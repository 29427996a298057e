"""Two controller replicas without leader election, each deciding from its own lagging watch.

Only optimistic concurrency stands between them. Each replica's watch delivers the API
server's changes in order but at its own pace, and a test or Hypothesis picks the exact
interleaving of decisions, releases and watch progress.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from controller.interleave import Server, claim_obj, make, pod_obj, settle
from controller.kit import NAMES, node
from gpushare_simulator.harness import invariants
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dra_driver.controller.allocator import Allocator
from dra_driver.controller.releaser import Releaser
from dra_driver.k8s.errors import ConflictError
from dra_driver.k8s.reconcile import Requeue

Object = dict[str, Any]
Step = tuple[str, int, Any]

# One card of 100 cores, half taken: two of the three 25-core claims fit, never three.
CLAIMS = ("x", "y", "z")
PODS = {"px": ("x",), "py": ("y",), "pz": ("z",), "pw": ("x",)}
"""Pod -> the claims it uses; pw shares x with px."""


class Replicas:
    """One API server, two replicas; each replica's watch has its own place in the change log.

    ``plain``: the card is published whole-only and the claims are sized by their config.
    """

    def __init__(self, *, plain: bool = False) -> None:
        built = [make(node("n", 1), shared=not plain) for _ in range(2)]
        self.servers: list[Server] = [server for _, server, *_ in built]
        self.allocators: list[Allocator] = [allocator for *_, allocator, _, _ in built]
        self.releasers: list[Releaser] = [releaser for *_, releaser, _ in built]
        self.servers[1].objs = self.servers[0].objs
        self.log: list[tuple[str, Object]] = []
        self.cursors = [0, 0]
        api = self.servers[0]
        api.put("claims", claim_obj("a0", "50", "4Gi", by_config=plain), deliver=False)
        api.put("pods", pod_obj("pa0", "a0"), deliver=False)
        for name in CLAIMS:
            api.put("claims", claim_obj(name, "25", "4Gi", by_config=plain), deliver=False)
        for pod, claims in PODS.items():
            api.put("pods", pod_obj(pod, *claims), deliver=False)
        self.collect()
        for _ in range(2):  # decide, then commit once the watch shows the write
            self.watch(0, len(self.log))
            self.step(("allocate", 0, "pa0"))
        for replica in (0, 1):
            self.watch(replica, len(self.log))

    def collect(self) -> None:
        """Move what the replicas wrote into the change log, in resourceVersion order."""
        for server in self.servers:
            self.log.extend(server.pending)
            server.pending = []
        self.log.sort(key=lambda change: int(change[1]["metadata"]["resourceVersion"]))

    def watch(self, replica: int, count: int) -> None:
        """Let a replica's watch deliver its next ``count`` changes."""
        start = self.cursors[replica]
        self.cursors[replica] = min(len(self.log), start + count)
        self.servers[replica].deliver(self.log[start : self.cursors[replica]])

    def step(self, step: Step) -> None:
        """Run one step: a replica's pass over a pod or a claim, or its watch moving on."""
        action, replica, what = step
        if action == "watch":
            self.watch(replica, what)
            return
        with contextlib.suppress(Requeue, ConflictError):
            if action == "allocate":
                self.allocators[replica].reconcile(("default", what))
            else:
                self.releasers[replica].reconcile(("default", what))
        self.collect()

    def claims(self) -> list[Object]:
        """Return the claims as the API server has them."""
        return self.servers[0].claims()

    def ungated(self) -> list[str]:
        """Pods whose scheduling gate is gone: they may run now."""
        return sorted(
            name
            for (kind, _, name), pod in self.servers[0].objs.items()
            if kind == "pods" and not pod["spec"].get("schedulingGates")
        )

    def violations(self) -> list[str]:
        """Return what must never hold at any moment: a pod free to run on an unsafe claim."""
        slices = [obj for (kind, *_), obj in self.servers[0].objs.items() if kind == "slices"]
        by_name = {claim["metadata"]["name"]: claim for claim in self.claims()}
        committed = [
            claim
            for claim in by_name.values()
            if NAMES.finalizer in (claim["metadata"].get("finalizers") or [])
            and (claim.get("status") or {}).get("allocation")
        ]
        problems = invariants.overcommitted(committed, slices, NAMES.driver)
        problems += invariants.allocated_twice(committed, NAMES.driver)
        for pod in self.ungated():
            for name in PODS.get(pod, ("a0",)):
                if by_name[name] not in committed:
                    problems.append(f"pod {pod} runs on claim {name}, which is not committed")
        return problems

    def drain(self) -> None:
        """Let replica 0 alone finish every pod with both watches caught up (no more races)."""
        for _ in range(3):
            for replica in (0, 1):
                self.watch(replica, len(self.log))
            for pod in PODS:
                self.step(("allocate", 0, pod))
                self.watch(0, len(self.log))
                self.step(("allocate", 0, pod))
            for claim in CLAIMS:
                self.step(("release", 0, claim))


@pytest.mark.parametrize("plain", [False, True], ids=["consumable-capacity", "config-sizes"])
def test_two_replicas_placing_different_pods_on_the_last_quarter_never_over_commit(
    plain: bool,
) -> None:
    """Each replica writes a claim the other has not seen; the later check clears its own."""
    replicas = Replicas(plain=plain)
    replicas.step(("allocate", 0, "px"))  # x tentatively on the card
    replicas.step(("allocate", 0, "pz"))  # z too: the card is full as A sees it
    replicas.step(("allocate", 1, "py"))  # B has not seen x or z: y goes on the same card
    for replica in (0, 1):
        replicas.watch(replica, len(replicas.log))
    replicas.step(("allocate", 1, "py"))  # B sees 125 cores and clears y
    replicas.watch(0, len(replicas.log))
    replicas.step(("allocate", 0, "px"))
    replicas.step(("allocate", 0, "pz"))
    assert replicas.ungated() == ["pa0", "px", "pz"]
    assert replicas.violations() == []
    assert "y" not in {c["metadata"]["name"] for c in replicas.claims() if c["status"]}


def test_a_replica_whose_pod_cache_lags_leaves_a_fresh_allocation_alone() -> None:
    """Replica B sees claim x allocated before it sees pod px: it asks the API server first."""
    _, server_a, allocator_a, _, _ = make(node("n", 1))
    _, server_b, _, releaser_b, _ = make(node("n", 1))
    server_b.objs = server_a.objs
    server_a.put("claims", claim_obj("x", "25", "4Gi"), deliver=False)
    created = list(server_a.pending)
    server_a.deliver()
    server_b.deliver(created)
    server_a.put("pods", pod_obj("px", "x"))  # B's pod watch has not delivered it yet
    settle(allocator_a, server_a, "px")
    server_b.deliver([("claims", server_a.objs[("claims", "default", "x")])])
    releaser_b.reconcile(("default", "x"))
    (claim,) = server_a.claims()
    assert claim["status"].get("allocation")
    assert NAMES.finalizer in claim["metadata"]["finalizers"]


def test_a_tentative_claim_whose_pod_is_gone_is_released() -> None:
    """A claim written but never committed, its pod deleted meanwhile, gives its card back."""
    replicas = Replicas()
    replicas.step(("allocate", 0, "py"))  # y is tentative: B never got to commit it
    replicas.watch(1, len(replicas.log))
    del replicas.servers[0].objs[("pods", "default", "py")]  # deleted, and B's watch saw it
    replicas.servers[1].view.pods._cache.pop(("default", "py"))
    replicas.step(("release", 1, "y"))
    (y,) = [c for c in replicas.claims() if c["metadata"]["name"] == "y"]
    assert not (y.get("status") or {}).get("allocation")
    assert NAMES.finalizer not in (y["metadata"].get("finalizers") or [])


_replica = st.integers(0, 1)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), _replica, st.sampled_from(sorted(PODS))),
        st.tuples(st.just("release"), _replica, st.sampled_from(CLAIMS)),
        st.tuples(st.just("watch"), _replica, st.integers(1, 4)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(_steps)
@example(  # checks before the watch shows the other's write would pass both
    [
        ("allocate", 0, "px"),
        ("allocate", 0, "pz"),
        ("allocate", 1, "py"),
        ("allocate", 1, "py"),
        ("allocate", 0, "px"),
        ("allocate", 0, "pz"),
    ]
)
@example(
    [
        ("allocate", 0, "px"),
        ("allocate", 0, "pz"),
        ("allocate", 1, "py"),
        ("allocate", 1, "pw"),
        ("watch", 0, 4),
        ("watch", 1, 4),
        ("allocate", 0, "px"),
        ("allocate", 1, "py"),
        ("allocate", 0, "pz"),
        ("allocate", 1, "pw"),
    ]
)
@pytest.mark.parametrize("plain", [False, True], ids=["consumable-capacity", "config-sizes"])
def test_no_interleaving_lets_a_pod_run_on_an_over_committed_card(
    plain: bool, steps: list[Step]
) -> None:
    """Any interleaving: committed claims never over-commit, and only committed ones run."""
    replicas = Replicas(plain=plain)
    for step in steps:
        replicas.step(step)
        assert replicas.violations() == [], step
    replicas.drain()
    slices = [obj for (kind, *_), obj in replicas.servers[0].objs.items() if kind == "slices"]
    assert replicas.violations() == []
    assert invariants.overcommitted(replicas.claims(), slices, NAMES.driver) == []
    # Two of x, y, z fit beside a0; pw runs with px on x.
    assert len({"px", "py", "pz"} & set(replicas.ungated())) == 2
