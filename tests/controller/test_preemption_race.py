"""Preemption held through the controller: arrivals, departures, evictions, crashes, lag, expiry.

One node of one or two T4s (100 cores, 16Gi each) with offline pods running on it; Hypothesis
picks the interleaving of online and offline arrivals, allocation passes, releases, pod
deletions, the kubelet binding ungated pods and finishing evicted ones, controller crashes
(a new process over the same store, between passes or right after any write of a pass),
watch progress, and clock jumps past a nomination's ``expires``. After every step:

- no online (or exempt) pod was ever evicted, and no offline pod had anyone evicted;
- every preemption the engine chose was minimal when it was chosen (no victim could be
  spared) and let the pod fit;
- the claims pods run on never over-commit a card, and the room a nomination holds is never
  given away (with its victims gone, the held room still fits beside everything else);
- no ungated pod keeps a nomination, and the one controller process never gets a conflict on
  its own writes (nothing else writes claims here: a conflict is a stale copy of its own).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from fractions import Fraction
from typing import Any
from unittest import mock

from controller.interleave import Harness, build, claim_obj, pod_obj, settle
from controller.kit import NAMES, node
from hypothesis import Phase, event, example, given, settings
from hypothesis import strategies as st

from dra_driver.controller import preemption
from dra_driver.engine import Placed, Policy, Snapshot, Unplaceable, place_pod
from dra_driver.engine.nomination import nomination_of
from dra_driver.engine.place import node_selector
from dra_driver.engine.preempt import DEFAULT_GRACE_SECONDS, Blocked, Preemption
from dra_driver.k8s.errors import ConflictError
from dra_driver.k8s.quantity import parse_quantity
from dra_driver.k8s.reconcile import Requeue

Object = dict[str, Any]
Step = tuple[str, int, int]

CAPACITY = {"cores": Fraction(100), "memory": parse_quantity("16Gi")}
SIZES = [("20", "2Gi"), ("40", "6Gi"), ("60", "8Gi"), ("80", "12Gi")]
HALVES = {"20": "10", "40": "20", "60": "30", "80": "40", "2Gi": "1Gi", "6Gi": "3Gi"}
HALVES |= {"8Gi": "4Gi", "12Gi": "6Gi"}
KINDS = ["online", "online-split", "offline", "exempt"]
"""Online (one claim, or the size in two claims), offline, offline with preemptible: false."""
EXPIRY = DEFAULT_GRACE_SECONDS + preemption.RELEASE_MARGIN_SECONDS
_real_preempt = preemption.preempt


def claim_of(name: str, kind: str, cores: str, memory: str) -> Object:
    """Return a claim of ``kind``'s priority for ``cores`` and ``memory``."""
    if kind.startswith("online"):
        return claim_obj(name, cores, memory, device_class=NAMES.online_device_class)
    made = claim_obj(name, cores, memory, device_class=NAMES.offline_device_class)
    if kind == "exempt":
        parameters = {
            "apiVersion": NAMES.config_api_version,
            "kind": NAMES.config_kind,
            "preemptible": False,
        }
        made["spec"]["devices"]["config"] = [
            {"opaque": {"driver": NAMES.driver, "parameters": parameters}}
        ]
    return made


class CrashedError(Exception):
    """The controller process dies right after one of its writes landed."""


class World:
    """The Server's store, the one controller process running now, and what was observed."""

    def __init__(self, cards: int) -> None:
        self.h: Harness = build(node("n", cards), preemption=True)
        self.kinds: dict[str, str] = {}
        """Pod -> its kind (one of :data:`KINDS`)."""
        self.claims: dict[str, list[str]] = {}
        """Pod -> its claims' names."""
        self.problems: list[str] = []
        self.chosen: set[str] = set()
        """Pods the engine chose a preemption for."""
        self.crash_in: int | None = None
        """Writes the controller makes before it dies mid-pass (``None``: it does not)."""
        self.crashes = 0

    # -- what happens -------------------------------------------------------------------------

    def arrive(self, kind: str, size: tuple[str, str], *, deliver: bool = False) -> str:
        """Create a gated pod of ``kind`` and its claims."""
        name = f"p{len(self.kinds)}"
        cores, memory = size
        sizes = [(HALVES[cores], HALVES[memory])] * 2 if kind == "online-split" else [size]
        claims = [f"{name}-{i}" for i in range(len(sizes))]
        for claim, (c, m) in zip(claims, sizes, strict=True):
            self.h.server.put("claims", claim_of(claim, kind, c, m), deliver=deliver)
        self.h.server.put("pods", pod_obj(name, *claims), deliver=deliver)
        self.kinds[name], self.claims[name] = kind, claims
        return name

    def step(self, step: Step) -> None:
        """Run one step."""
        action, a, b = step
        server = self.h.server
        pods = sorted(self.kinds, key=lambda p: int(p[1:]))
        if action == "arrive":
            self.arrive(KINDS[a], SIZES[b])
        elif action == "allocate" and (gated := self._gated()):
            self._quietly(self.h.allocator.reconcile, ("default", gated[a % len(gated)]))
        elif action == "release" and pods:
            claims = self.claims[pods[a % len(pods)]]
            for claim in claims:
                self._quietly(self.h.releaser.reconcile, ("default", claim))
        elif action == "kubelet":
            self.kubelet()
        elif action == "depart" and pods:
            server.delete("pods", "default", pods[a % len(pods)], deliver=False)
        elif action == "watch":
            changes, server.pending = server.pending[:a], server.pending[a:]
            server.deliver(changes)
        elif action == "crash":
            self.h = self.h.restart()
        elif action == "crash-mid-pass":
            self.crash_in = a
        elif action == "expire":
            self.h.clock.advance(EXPIRY + 1)
        elif action == "round":
            self.round()

    def _gated(self) -> list[str]:
        """Return the pods that still wait behind the gate, oldest first."""
        return [
            name
            for name in sorted(self.kinds, key=lambda p: int(p[1:]))
            if (pod := self.h.server.objs.get(("pods", "default", name)))
            and pod["spec"].get("schedulingGates")
        ]

    def kubelet(self) -> None:
        """Bind ungated pods where their claims are and run them; finish evicted pods."""
        server = self.h.server
        where = server.nodes_of_claims()
        for (kind, namespace, name), pod in list(server.objs.items()):
            if kind != "pods":
                continue
            if pod["metadata"].get("deletionTimestamp"):
                server.delete("pods", namespace, name, deliver=False)
            elif not pod["spec"].get("schedulingGates") and not pod["spec"].get("nodeName"):
                nodes = {where.get(claim) for claim in self.claims[name]}
                assert len(nodes) == 1, f"ungated {name} on {nodes}"
                assert None not in nodes, f"ungated {name} on an unallocated claim"
                bound = {**pod, "spec": {**pod["spec"], "nodeName": nodes.pop()}}
                server.put("pods", {**bound, "status": {"phase": "Running"}}, deliver=False)

    def round(self) -> None:
        """Let everything catch up once: watch, kubelet, releases, then every gated pod."""
        self.h.server.deliver()
        self.kubelet()
        self.h.server.deliver()
        for claims in self.claims.values():
            for claim in claims:
                self._quietly(self.h.releaser.reconcile, ("default", claim))
        self.h.server.deliver()
        for name in sorted(self.kinds, key=lambda p: int(p[1:])):
            self._quietly(self.h.allocator.reconcile, ("default", name))
            self.h.server.deliver()

    def _quietly(self, reconcile: Any, key: tuple[str, str]) -> None:
        """Run one reconcile as a loop would; a crash (armed by a step) starts a new process."""
        server = self.h.server
        if self.crash_in is not None:
            server.put = self._dying(server.put)  # type: ignore[method-assign]
        try:
            reconcile(key)
        except Requeue:
            pass
        except CrashedError:
            self.crash_in = None
            self.crashes += 1
            self.h = self.h.restart()
        except ConflictError as exc:
            # One process writes every claim: its writes never race each other.
            self.problems.append(f"{reconcile.__qualname__}{key}: {exc} at {_origin()}")
        except KeyError:
            # The harness Server's lookup of an object deleted meanwhile (the real writers get
            # NotFound); a KeyError of the controller's own code is a bug.
            where = traceback.extract_tb(sys.exc_info()[2])[-1].filename
            if not where.endswith("interleave.py"):
                raise
        finally:
            server.__dict__.pop("put", None)

    def _dying(self, put: Any) -> Any:
        """Wrap the Server's ``put``: the write lands, and after the last one the process dies."""

        def dying(kind: str, obj: Object, *, deliver: bool = True) -> Object:
            written = put(kind, obj, deliver=deliver)
            assert self.crash_in is not None
            self.crash_in -= 1
            if self.crash_in <= 0:
                raise CrashedError
            return written

        return dying

    # -- what is checked ----------------------------------------------------------------------

    def recording(
        self,
        snapshot: Snapshot,
        pod: Object,
        claims: Sequence[Object],
        policy: Policy,
        **options: Any,
    ) -> Preemption | Blocked | None:
        """Stand in for the engine's ``preempt``: check its choice against the snapshot it had."""
        found = _real_preempt(snapshot, pod, claims, policy, **options)
        if not isinstance(found, Preemption):
            return found
        name = pod["metadata"]["name"]
        self.chosen.add(name)
        if not self.kinds[name].startswith("online"):
            self.problems.append(f"{self.kinds[name]} pod {name} preempts")
        for victim in found.victims:
            if self.kinds[victim.pod.name] != "offline":
                self.problems.append(f"{self.kinds[victim.pod.name]} {victim.pod.name} a victim")
        pinned = [*options.get("pinned", ()), node_selector(found.node)]

        def fits(gone: Sequence[str]) -> bool:
            with snapshot.without(gone):
                decision = place_pod(
                    snapshot, pod, claims, policy, pinned=pinned, node_fit=options.get("node_fit")
                )
            assert isinstance(decision, Placed | Unplaceable)
            return isinstance(decision, Placed)

        if not fits([uid for victim in found.victims for uid in victim.claims]):
            self.problems.append(f"{name} does not fit after evicting {found.victims}")
        for spared in found.victims:
            rest = [uid for v in found.victims if v is not spared for uid in v.claims]
            if fits(rest):
                self.problems.append(f"{name} fits with {spared.pod.name} spared")
        return found

    def check(self, step: Step) -> None:
        """Assert every invariant of the store as it is after ``step``."""
        assert self.problems == [], (step, self.problems)
        for ref in self.h.server.evictions:
            assert self.kinds[ref.name] == "offline", (step, ref)
        running = self._running_claims()
        used: dict[tuple[str, str], dict[str, Fraction]] = {}
        held: dict[tuple[str, str], dict[str, Fraction]] = {}
        victims: set[str] = set()
        for (kind, _, name), claim in self.h.server.objs.items():
            if kind != "claims":
                continue
            allocation = (claim.get("status") or {}).get("allocation")
            nomination = nomination_of(claim, NAMES.nomination_annotation)
            if allocation is None and nomination is not None:
                _add(held, nomination.results)
                victims.update(victim.uid for victim in nomination.victims)
            committed = NAMES.finalizer in (claim["metadata"].get("finalizers") or [])
            if allocation and (committed or name in running):
                _add(used, allocation["devices"]["results"])
        for device, total in used.items():
            for resource, value in total.items():
                assert value <= CAPACITY[resource], (step, device, total)
        # The held room is the nominated pod's alone: once its victims are gone, it fits.
        staying: dict[tuple[str, str], dict[str, Fraction]] = {}
        for claim in self.h.server.claims():
            allocation = (claim.get("status") or {}).get("allocation")
            committed = NAMES.finalizer in (claim["metadata"].get("finalizers") or [])
            reserved = {r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or []}
            name = claim["metadata"]["name"]
            if allocation and (committed or name in running) and not reserved & victims:
                _add(staying, allocation["devices"]["results"])
        for device, total in held.items():
            for resource, value in total.items():
                taken = value + staying.get(device, {}).get(resource, Fraction(0))
                assert taken <= CAPACITY[resource], (step, device, resource, "held room taken")
        for name in running:
            annotations = self.h.server.objs[("claims", "default", name)]["metadata"]
            assert NAMES.nomination_annotation not in (annotations.get("annotations") or {}), (
                step,
                name,
            )

    def _running_claims(self) -> set[str]:
        """Return the claims of ungated pods: the ones a pod may run on."""
        return {
            claim
            for (kind, _, name), pod in self.h.server.objs.items()
            if kind == "pods" and not pod["spec"].get("schedulingGates")
            for claim in self.claims[name]
        }


def _origin() -> str:
    """Return where the exception being handled was raised in the controller."""
    frames = traceback.extract_tb(sys.exc_info()[2])
    ours = [f for f in frames if "/dra_driver/" in f.filename] or frames
    return f"{ours[-1].filename.rsplit('/', 2)[-1]}:{ours[-1].lineno} ({ours[-1].name})"


def _add(totals: dict[tuple[str, str], dict[str, Fraction]], results: Sequence[Object]) -> None:
    """Add the consumed amounts of allocation ``results`` to ``totals`` per card."""
    for result in results:
        total = totals.setdefault((result["pool"], result["device"]), {})
        for resource, value in (result.get("consumedCapacity") or {}).items():
            total[resource] = total.get(resource, Fraction(0)) + parse_quantity(value)


_pod = st.integers(0, 15)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.sampled_from([0, 0, 1, 2, 3]), st.integers(0, 3)),
        st.tuples(st.just("allocate"), _pod, st.just(0)),
        st.tuples(st.just("release"), _pod, st.just(0)),
        st.tuples(st.just("kubelet"), st.just(0), st.just(0)),
        st.tuples(st.just("depart"), _pod, st.just(0)),
        st.tuples(st.just("watch"), st.integers(1, 8), st.just(0)),
        st.tuples(st.just("crash"), st.just(0), st.just(0)),
        st.tuples(st.just("crash-mid-pass"), st.integers(1, 4), st.just(0)),
        st.tuples(st.just("expire"), st.just(0), st.just(0)),
        st.tuples(st.just("round"), st.just(0), st.just(0)),
    ),
    min_size=12,
    max_size=40,
)
_running = st.lists(
    st.tuples(st.sampled_from([2, 2, 2, 3]), st.integers(0, 3)), min_size=2, max_size=6
)
_online = st.tuples(st.sampled_from([0, 1]), st.integers(1, 3))


_ROUND: Step = ("round", 0, 0)


def _evict_and_crash() -> list[Step]:
    """Evict for an online 60/8Gi pod, crash, then let a 20/2Gi pod try the held room."""
    return [
        ("allocate", 0, 0),  # p2, online 60/8Gi
        ("watch", 8, 0),
        ("crash", 0, 0),
        ("arrive", 2, 0),  # p3
        ("allocate", 3, 0),
        ("kubelet", 0, 0),
        ("watch", 8, 0),
        ("release", 0, 0),
        ("release", 1, 0),
        ("watch", 8, 0),
        ("allocate", 3, 0),
        ("round", 0, 0),
        ("round", 0, 0),
    ]


@settings(max_examples=150, deadline=None, phases=[p for p in Phase if p is not Phase.explain])
@given(cards=st.integers(1, 2), running=_running, online=_online, steps=_steps)
@example(cards=1, running=[(2, 1), (2, 1)], online=(0, 2), steps=_evict_and_crash())
@example(  # the nomination expires in the pass that can place its pod
    cards=1, running=[(2, 0), (2, 0)], online=(0, 3), steps=[_ROUND, ("expire", 0, 0), _ROUND]
)
def test_no_interleaving_evicts_wrongly_or_overcommits_through_the_controller(
    cards: int, running: list[tuple[int, int]], online: tuple[int, int], steps: list[Step]
) -> None:
    """After every step: offline victims only, for online pods, minimal; room never overbooked."""
    world = World(cards)
    with mock.patch.object(preemption, "preempt", world.recording):
        for kind, size in running:  # offline pods running before the steps start
            name = world.arrive(KINDS[kind], SIZES[size], deliver=True)
            try:
                settle(world.h.allocator, world.h.server, name)
            except AssertionError:
                continue  # no room: it stays gated
        world.kubelet()
        world.h.server.deliver()
        world.arrive(KINDS[online[0]], SIZES[online[1]])  # waits for the steps to place it
        for step in steps:
            world.step(step)
            world.check(step)
    evictions = len(world.h.server.evictions)
    event(f"evicted: {'none' if not evictions else '1' if evictions == 1 else 'more'}")
    event(f"crashed mid-pass: {'yes' if world.crashes else 'no'}")
    placed = [name for name in world.chosen if name not in world._gated()]
    event(f"preempting pods placed by the end: {'none' if not placed else 'some'}")
