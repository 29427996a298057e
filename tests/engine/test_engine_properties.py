"""Property tests of the engine: random clusters and random allocate/release/crash/conflict runs."""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

from controller.kit import DRIVER, card, claim, cluster, config, node, pod, request, share_ids
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.api import Placement
from dra_driver.engine import Placed, Policy, Snapshot, place_pod
from dra_driver.k8s.quantity import parse_quantity
from dra_driver.structured.allocated import AllocatedState

Object = dict[str, Any]
GI = 2**30
MI = 2**20

inventories = st.lists(
    st.lists(st.sampled_from([4, 8, 16]), min_size=1, max_size=3), min_size=1, max_size=3
)
shares = st.fixed_dictionaries(
    {
        "cores": st.one_of(st.none(), st.integers(0, 100)),
        "memory": st.one_of(st.none(), st.integers(1, 17 * 1024)),  # MiB
        "isolation": st.sampled_from(["burst-share", "fixed-share", "exclusive"]),
        "priority": st.sampled_from(["online", "offline"]),
    }
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), shares, st.sampled_from(list(Placement))),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("crash")),
        st.tuples(st.just("conflict"), shares),
    ),
    max_size=25,
)


def build(memories: list[list[int]], claims: list[Object] = ()) -> Snapshot:
    """Return a snapshot of nodes n0.. with cards of the given GiB."""
    return cluster(
        *(
            node(f"n{i}", [card(j, f"{gib}Gi", node=f"n{i}") for j, gib in enumerate(cards)])
            for i, cards in enumerate(memories)
        ),
        claims=claims,
    )


def share_claim(name: str, share: dict[str, Any]) -> Object:
    """Return a one-request claim for a random share."""
    memory = None if share["memory"] is None else f"{share['memory']}Mi"
    cores = None if share["cores"] is None else str(share["cores"])
    return claim(
        name,
        request(cores=cores, memory=memory),
        configs=[config(isolation=share["isolation"], priority=share["priority"])],
    )


def with_allocation(c: Object, decision: Placed) -> Object:
    """Return the claim as the API stores it after the controller's write."""
    return {**c, "status": {"allocation": decision.claims[0].status("2026-01-01T00:00:00Z")}}


def check_cards(snapshot: Snapshot, truth: list[Object]) -> None:
    """No card exceeds a capacity; an exclusive share is alone on its card."""
    per_device: dict[tuple[str, str], list[tuple[Object, Object]]] = {}
    for c in truth:
        for result in c["status"]["allocation"]["devices"]["results"]:
            per_device.setdefault((result["pool"], result["device"]), []).append((c, result))
    for (pool, name), entries in per_device.items():
        device = snapshot.by_id[(DRIVER, pool, name)]
        for capacity, cap in device.capacities.items():
            used = sum(parse_quantity(r["consumedCapacity"][capacity]) for _, r in entries)
            assert used <= cap.value, (pool, name, capacity)
        exclusive = [
            c
            for c, _ in entries
            if c["spec"]["devices"]["config"][0]["opaque"]["parameters"]["isolation"] == "exclusive"
        ]
        assert not exclusive or len(entries) == 1, (pool, name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memories=inventories, ops=operations)
def test_random_runs_never_overcommit_and_accounting_equals_a_rebuild(memories, ops):
    """Allocate/release/crash/conflict: cards never overflow and released shares free exactly."""
    truth: list[Object] = []
    snapshot = build(memories)
    ids = share_ids()
    for number, op in enumerate(ops):
        if op[0] == "allocate":
            c = share_claim(f"c{number}", op[1])
            decision = place_pod(snapshot, pod(), [c], Policy.uniform(op[2]), share_id=ids)
            if isinstance(decision, Placed):
                written = with_allocation(c, decision)
                truth.append(written)
                snapshot.update_claim(written)
        elif op[0] == "release" and truth:
            gone = truth.pop(op[1] % len(truth))
            snapshot.remove_claim(gone["metadata"]["uid"])
        elif op[0] == "crash":
            snapshot = build(memories, truth)
        elif op[0] == "conflict":
            # Decided, but the write lost a race: nothing may be counted.
            place_pod(snapshot, pod(), [share_claim("lost", op[1])], Policy(), share_id=ids)
        check_cards(snapshot, truth)
        assert snapshot.state == AllocatedState.from_claims(truth)
    for gone in truth:
        snapshot.remove_claim(gone["metadata"]["uid"])
    assert snapshot.state == AllocatedState()


# -- a brute-force reference --------------------------------------------------------------


def consumption(share: dict[str, Any], total_memory: int) -> tuple[int, int]:
    """Return what one share takes, by the rules of docs/resource-model.md written out by hand."""
    if share["isolation"] == "exclusive":
        return 100, total_memory
    cores = 100 if share["cores"] is None else share["cores"]
    memory = total_memory if share["memory"] is None else share["memory"] * MI
    return cores, memory


def reference(
    memories: list[list[int]],
    used: dict[tuple[int, int], tuple[int, int, int]],
    share: dict[str, Any],
    placement: Placement,
) -> tuple[str, str] | None:
    """Return the best (node, device) by exhaustive search, or None when nothing fits."""
    candidates = []
    for n, cards in enumerate(memories):
        per_node = []
        for j, gib in enumerate(cards):
            total = gib * GI
            cores_used, memory_used, count = used.get((n, j), (0, 0, 0))
            want_cores, want_memory = consumption(share, total)
            if share["isolation"] == "exclusive" and count:
                continue
            if cores_used + want_cores > 100 or memory_used + want_memory > total:
                continue
            after = (
                Fraction(100 - cores_used - want_cores, 100)
                + Fraction(total - memory_used - want_memory, total)
            ) / 2
            per_node.append((after, j))
        if not per_node:
            continue
        sign = 1 if placement is Placement.BINPACK else -1
        after, j = min(per_node, key=lambda item: (sign * item[0], f"0000:{item[1] + 1:02x}:00.0"))
        node_fractions = []
        for k, gib in enumerate(cards):
            total = gib * GI
            cores_used, memory_used, _ = used.get((n, k), (0, 0, 0))
            if k == j:
                want_cores, want_memory = consumption(share, total)
                cores_used, memory_used = cores_used + want_cores, memory_used + want_memory
            node_fractions.append(
                (Fraction(100 - cores_used, 100) + Fraction(total - memory_used, total)) / 2
            )
        node_after = sum(node_fractions) / len(node_fractions)
        candidates.append(((sign * node_after, f"n{n}"), f"n{n}", f"gpu-{j}"))
    if not candidates:
        return None
    _, best_node, best_device = min(candidates)
    return best_node, best_device


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memories=inventories,
    earlier=st.lists(shares, max_size=6),
    share=shares.filter(lambda s: s["priority"] == "online"),
    placement=st.sampled_from(list(Placement)),
)
def test_single_share_matches_the_brute_force_choice(memories, earlier, share, placement):
    """For one online share, the engine fits iff something fits, and picks the reference's best."""
    snapshot = build(memories)
    ids = share_ids()
    used: dict[tuple[int, int], tuple[int, int, int]] = {}
    for number, drawn in enumerate(earlier):
        c = share_claim(f"e{number}", {**drawn, "priority": "online"})
        decision = place_pod(snapshot, pod(), [c], Policy.uniform(Placement.BINPACK), share_id=ids)
        if isinstance(decision, Placed):
            result = decision.claims[0].results[0]
            snapshot.update_claim(with_allocation(c, decision))
            key = (int(decision.node[1:]), int(result["device"].split("-")[1]))
            cores, memory, count = used.get(key, (0, 0, 0))
            consumed = result["consumedCapacity"]
            used[key] = (
                cores + int(parse_quantity(consumed["cores"])),
                memory + int(parse_quantity(consumed["memory"])),
                count + 1,
            )
    expected = reference(memories, used, share, placement)
    decision = place_pod(
        snapshot, pod(), [share_claim("x", share)], Policy.uniform(placement), share_id=ids
    )
    if expected is None:
        assert not isinstance(decision, Placed)
    else:
        assert isinstance(decision, Placed)
        assert (decision.node, decision.claims[0].results[0]["device"]) == expected


@settings(max_examples=80, deadline=None)
@given(
    cards=st.lists(st.sampled_from(["T4", "A100"]), min_size=1, max_size=3),
    cores=st.lists(st.integers(10, 100), min_size=2, max_size=3),
    constraint=st.sampled_from([None, "distinct", "match"]),
)
def test_multi_request_feasibility_matches_exhaustive_search(cards, cores, constraint):
    """Several requests with constraints fit iff some assignment of cards satisfies everything."""
    snapshot = cluster(
        node("n", [card(j, "16Gi", product=p, node="n") for j, p in enumerate(cards)])
    )
    requests = [request(f"r{i}", cores=str(c), memory="1Gi") for i, c in enumerate(cores)]
    constraints = []
    if constraint == "distinct":
        constraints = [{"distinctAttribute": f"{DRIVER}/uuid"}]
    elif constraint == "match":
        constraints = [{"matchAttribute": f"{DRIVER}/productName"}]
    decision = place_pod(
        snapshot,
        pod(),
        [claim("c", *requests, constraints=constraints)],
        Policy(),
        share_id=share_ids(),
    )

    def satisfies(assignment: tuple[int, ...]) -> bool:
        load = [0] * len(cards)
        for j, c in zip(assignment, cores, strict=True):
            load[j] += c
        if any(value > 100 for value in load):
            return False
        if constraint == "distinct":
            return len(set(assignment)) == len(assignment)
        if constraint == "match":
            return len({cards[j] for j in assignment}) == 1
        return True

    exists = any(satisfies(a) for a in itertools.product(range(len(cards)), repeat=len(cores)))
    assert isinstance(decision, Placed) is exists
    if isinstance(decision, Placed):
        chosen = tuple(int(r["device"].split("-")[1]) for r in decision.claims[0].results)
        assert satisfies(chosen)
