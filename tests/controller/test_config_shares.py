"""Shares sized by GpuShareConfig on cards published whole-only (no consumable capacity)."""

from __future__ import annotations

from typing import Any

from controller.kit import (
    NAMES,
    allocated,
    card,
    claim,
    cluster,
    commit,
    config,
    node,
    pod,
    request,
    share_ids,
    slices_of,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from dra_driver.controller.metrics import CardCollector
from dra_driver.engine import Placed, Policy, Snapshot, Unplaceable, place_pod
from dra_driver.structured.configshares import SCHEDULER_FINALIZER

POLICY = Policy()
Object = dict[str, Any]


def sized(name: str, cores: str, memory: str, **fields: str) -> dict[str, object]:
    """Return a claim whose config, not a capacity request, gives its size."""
    return claim(name, configs=[config(cores=cores, memory=memory, **fields)])


def plain(*nodes: object, **kwargs: object) -> object:
    """Return a snapshot of nodes publishing plain (whole-only) devices."""
    return cluster(*nodes, slices=slices_of(nodes, shared=False), **kwargs)  # type: ignore[arg-type]


def place(snapshot: object, *claims: dict[str, object]) -> Placed | Unplaceable:
    """Place one pod's claims with deterministic share IDs."""
    return place_pod(snapshot, pod(), list(claims), POLICY, share_id=share_ids())  # type: ignore[arg-type]


def test_two_sized_claims_share_one_plain_card_without_share_fields() -> None:
    """Two 50-core claims land on one plain card; results carry no shareID, config the size."""
    snapshot = plain(node("n", 1))
    first, second = sized("a", "50", "8Gi"), sized("b", "50", "8Gi")
    placed = place(snapshot, first)
    assert isinstance(placed, Placed)
    commit(snapshot, [first], placed)
    again = place(snapshot, second)
    assert isinstance(again, Placed)
    (result,) = again.claims[0].results
    assert result["device"] == "gpu-0"
    assert "shareID" not in result
    assert "consumedCapacity" not in result
    parameters = again.claims[0].config[-1]["opaque"]["parameters"]
    assert (parameters["cores"], parameters["memory"]) == ("50", "8Gi")
    commit(snapshot, [second], again)
    assert snapshot.overcommitted(allocated([second], again)) == []


def test_a_share_that_no_longer_fits_is_unplaceable_with_what_is_free() -> None:
    """After 60 cores are taken, a 50-core claim is refused, naming the 40 cores left."""
    snapshot = plain(node("n", 1))
    first = sized("a", "60", "4Gi")
    commit(snapshot, [first], place(snapshot, first))  # type: ignore[arg-type]
    outcome = place(snapshot, sized("b", "50", "4Gi"))
    assert isinstance(outcome, Unplaceable)
    assert "40 cores" in outcome.reason
    assert not outcome.refused


def test_a_claim_kube_scheduler_allocated_holds_the_plain_card_whole() -> None:
    """A claim with kube-scheduler's finalizer counts as the whole card, whatever its config."""
    theirs = sized("theirs", "10", "1Gi")
    theirs["metadata"]["finalizers"] = [SCHEDULER_FINALIZER]
    snapshot = plain(node("n", 1))
    placed = place(snapshot, theirs)
    assert isinstance(placed, Placed)
    commit(snapshot, [theirs], placed)
    outcome = place(snapshot, sized("mine", "10", "1Gi"))
    assert isinstance(outcome, Unplaceable)
    assert "used whole" in outcome.reason


def test_without_sizes_or_with_exclusive_isolation_a_plain_card_goes_whole() -> None:
    """An unsized claim and an exclusive sized one each take a whole plain card."""
    snapshot = plain(node("n", 2))
    whole, exclusive = claim("whole"), sized("x", "10", "1Gi", isolation="exclusive")
    for made in (whole, exclusive):
        placed = place(snapshot, made)
        assert isinstance(placed, Placed)
        commit(snapshot, [made], placed)
    assert isinstance(place(snapshot, sized("late", "1", "1Mi")), Unplaceable)


def test_the_switch_off_hands_plain_cards_out_whole() -> None:
    """share_plain=False: a second sized claim finds the only plain card taken."""
    snapshot = plain(node("n", 1), share_plain=False)
    first = sized("a", "10", "1Gi")
    placed = place(snapshot, first)
    assert isinstance(placed, Placed)
    commit(snapshot, [first], placed)
    assert isinstance(place(snapshot, sized("b", "10", "1Gi")), Unplaceable)


def test_capacity_requests_and_config_sizes_together_are_refused() -> None:
    """A request with capacity whose config also sets cores is refused, naming both places."""
    both = claim("both", request(cores="30", memory="1Gi"), configs=[config(cores="30")])
    outcome = place(cluster(node("n", 1)), both)
    assert isinstance(outcome, Unplaceable)
    assert outcome.refused
    assert "capacity" in outcome.reason
    assert "cores or memory" in outcome.reason


def test_on_shareable_cards_config_sizes_become_consumed_capacity() -> None:
    """With consumable capacity, a sized claim is written as a share of its config's size."""
    placed = place(cluster(node("n", 1)), sized("a", "30", "5Gi"))
    assert isinstance(placed, Placed)
    (result,) = placed.claims[0].results
    assert result["shareID"].startswith("11111111-")
    assert result["consumedCapacity"] == {"cores": "30", "memory": "5Gi"}


def test_shares_written_before_the_gate_turned_on_keep_their_size() -> None:
    """Config shares without shareID on a card now shareable count as their size, not whole."""
    before = plain(node("n", 1))
    old = sized("old", "40", "6Gi")
    written = commit(before, [old], place(before, old))  # type: ignore[arg-type]
    after = cluster(node("n", 1), claims=written)
    assert after.overcommitted(written) == []
    new = place(after, claim("new", request(cores="60", memory="10Gi")))
    assert isinstance(new, Placed)
    assert new.claims[0].results[0]["device"] == "gpu-0"
    assert isinstance(place(after, claim("big", request(cores="61", memory="1Gi"))), Unplaceable)


# -- random runs ---------------------------------------------------------------------------

GI = 2**30
sizes = st.fixed_dictionaries(
    {
        "cores": st.one_of(st.none(), st.integers(0, 100)),
        "memory": st.one_of(st.none(), st.integers(1, 17 * 1024)),  # MiB
        "isolation": st.sampled_from(["burst-share", "fixed-share", "exclusive"]),
    }
)
runs = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), sizes),
        st.tuples(st.just("scheduler"), st.integers(0, 3)),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("crash")),
    ),
    max_size=25,
)


def random_claim(name: str, drawn: dict[str, Any]) -> Object:
    """Return a claim sized by config as drawn (unset fields left out)."""
    fields = {"isolation": drawn["isolation"]}
    if drawn["cores"] is not None:
        fields["cores"] = str(drawn["cores"])
    if drawn["memory"] is not None:
        fields["memory"] = f"{drawn['memory']}Mi"
    return claim(name, configs=[config(**fields)])


def by_hand(c: Object, total_memory: int) -> tuple[int, int, bool]:
    """Return (cores, memory, whole) a claim takes, from its config, by the documented rules."""
    if SCHEDULER_FINALIZER in (c["metadata"].get("finalizers") or []):
        return 100, total_memory, True
    parameters = c["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    if parameters["isolation"] == "exclusive" or not {"cores", "memory"} & set(parameters):
        return 100, total_memory, True
    memory = parameters.get("memory")
    return (
        int(parameters.get("cores", 100)),
        total_memory if memory is None else int(memory[:-2]) * 2**20,
        False,
    )


def check_plain_cards(snapshot: Snapshot, truth: list[Object]) -> None:
    """Per card: config sizes add up to no more than it has; a whole-card holder is alone."""
    per_card: dict[str, list[Object]] = {}
    for c in truth:
        (result,) = c["status"]["allocation"]["devices"]["results"]
        assert "shareID" not in result
        per_card.setdefault(result["device"], []).append(c)
    for device, holders in per_card.items():
        total = int(snapshot.by_id[(NAMES.driver, "n", device)].capacities["memory"].value)
        taken = [by_hand(c, total) for c in holders]
        assert sum(cores for cores, _, _ in taken) <= 100, device
        assert sum(memory for _, memory, _ in taken) <= total, device
        assert len(holders) == 1 or not any(whole for _, _, whole in taken), device


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memories=st.lists(st.sampled_from([4, 8, 16]), min_size=1, max_size=3), ops=runs)
def test_random_runs_on_plain_cards_never_overcommit(memories: list[int], ops: list[Any]) -> None:
    """Allocate/scheduler/release/crash on plain cards: sizes never overflow a card."""
    inventory = node("n", [card(j, f"{gib}Gi", node="n") for j, gib in enumerate(memories)])
    truth: list[Object] = []
    snapshot = plain(inventory)
    for number, op in enumerate(ops):
        if op[0] == "allocate":
            made = random_claim(f"c{number}", op[1])
            decision = place(snapshot, made)
            if isinstance(decision, Placed):
                truth += commit(snapshot, [made], decision)
        elif op[0] == "scheduler":
            # kube-scheduler takes an idle card whole for a pod the controller never saw.
            idle = sorted(d.name for d in snapshot.devices["n"] if not snapshot.state.in_use(d.id))
            if idle:
                theirs = random_claim(
                    f"s{number}", {"cores": 5, "memory": 1, "isolation": "burst-share"}
                )
                theirs["metadata"]["finalizers"] = [SCHEDULER_FINALIZER]
                result = {"request": "gpu", "driver": NAMES.driver, "pool": "n"}
                result["device"] = idle[op[1] % len(idle)]
                copied = [
                    {"source": "FromClaim", **entry}
                    for entry in theirs["spec"]["devices"]["config"]
                ]  # kube-scheduler copies the claim's config, sizes included
                theirs["status"] = {
                    "allocation": {"devices": {"results": [result], "config": copied}}
                }
                truth.append(theirs)
                snapshot.update_claim(theirs)
        elif op[0] == "release" and truth:
            gone = truth.pop(op[1] % len(truth))
            snapshot.remove_claim(gone["metadata"]["uid"])
        elif op[0] == "crash":
            snapshot = plain(inventory, claims=truth)
        check_plain_cards(snapshot, truth)
        assert snapshot.state == plain(inventory, claims=truth).state


def test_a_whole_card_wait_on_plain_cards_reads_as_it_does_elsewhere() -> None:
    """An unsized claim waiting for a plain card is told the amounts it needs, not 'idle card'."""
    snapshot = plain(node("n", 1))
    first = claim("first")
    commit(snapshot, [first], place(snapshot, first))  # type: ignore[arg-type]
    outcome = place(snapshot, claim("second"))
    assert isinstance(outcome, Unplaceable)
    assert "no card with 100 cores, 16Gi memory free" in outcome.reason


def test_the_card_metric_counts_cards_by_how_they_are_shared() -> None:
    """gpushare_controller_cards: shareable cards, whole-only shared by config, whole-only whole."""
    snapshots = {
        "consumable-capacity": cluster(node("a", 2)),
        "config-sizes": plain(node("b", 3)),
        "whole": plain(node("c", 1), share_plain=False),
    }
    for mode, snapshot in snapshots.items():
        registry = CollectorRegistry()
        registry.register(CardCollector(lambda snapshot=snapshot: snapshot))
        counts = {
            m: registry.get_sample_value("gpushare_controller_cards", {"sharing": m})
            for m in snapshots
        }
        expected = len(snapshot.by_id)
        assert counts == {m: (expected if m == mode else 0) for m in snapshots}
