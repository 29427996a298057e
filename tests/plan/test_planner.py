"""Plans: where pods land under binpack and spread, what stays pending and why, card usage."""

from __future__ import annotations

from fractions import Fraction

from plan.builders import EXAMPLE, NAMES, claim, deployment, dump, plan_of, pod, template

from dra_driver.api import Placement
from dra_driver.plan.planner import Outcome, PodPlan, PolicyPlan

GI = 2**30


def _pods(result: PolicyPlan) -> dict[str, PodPlan]:
    return {p.name: p for p in result.pods}


def _example() -> tuple[dict[str, PodPlan], dict[str, PodPlan]]:
    binpack, spread = plan_of(EXAMPLE.read_text()).policies
    return _pods(binpack), _pods(spread)


def test_binpack_shares_one_card_and_spread_uses_two() -> None:
    """The example's two 5Gi/40-core replicas: one card under binpack, two cards under spread."""
    binpack, spread = _example()
    for pods in (binpack, spread):
        assert [s.cores for s in pods["infer-0"].shares] == [Fraction(40)]
        assert [s.memory for s in pods["infer-0"].shares] == [Fraction(5 * GI)]
    cards = {
        policy: [(pods[name].node, pods[name].shares[0].device) for name in ("infer-0", "infer-1")]
        for policy, pods in (("binpack", binpack), ("spread", spread))
    }
    # Nothing pins them: binpack fills the one-card node first, spread takes the emptiest.
    assert cards == {
        "binpack": [("node-1", "gpu-0"), ("node-1", "gpu-0")],
        "spread": [("node-2", "gpu-0"), ("node-1", "gpu-0")],
    }


def test_later_pods_see_the_capacity_earlier_ones_took() -> None:
    """Under binpack a 10Gi batch pod no longer fits beside two 5Gi shares; under spread it does."""
    binpack, spread = _example()
    assert binpack["batch-1"].outcome is Outcome.PENDING
    assert binpack["batch-1"].fits_alone is True
    assert "10Gi memory" in (binpack["batch-1"].reason or "")
    assert spread["batch-1"].outcome is Outcome.PLACED

    def cards(*names: str) -> set[tuple[str | None, str]]:
        return {(spread[name].node, spread[name].shares[0].device) for name in names}

    # Offline work joins the cards that run online work: each batch pod beside one replica.
    assert (
        cards("batch-0", "batch-1")
        == cards("infer-0", "infer-1")
        == {
            ("node-1", "gpu-0"),
            ("node-2", "gpu-0"),
        }
    )


def test_a_pod_needing_more_cards_than_any_node_has_never_fits() -> None:
    """The giant asks three whole cards: pending under both policies, and not even alone."""
    binpack, spread = _example()
    for pods in (binpack, spread):
        giant = pods["giant"]
        assert giant.outcome is Outcome.PENDING
        assert giant.fits_alone is False
        assert (giant.reason or "").startswith("0/2 nodes are available")


def test_memory_beyond_the_largest_card_is_refused_with_the_webhooks_words() -> None:
    """200Gi on 15Gi cards: REFUSED naming the template and its field, as kubectl apply would be."""
    text = dump(template("too-big", memory="200Gi"), pod("giant", "too-big"))
    (result,) = plan_of(text, policies=[Placement.BINPACK]).policies
    (giant,) = result.pods
    assert giant.outcome is Outcome.REFUSED
    assert giant.reason == (
        "ResourceClaimTemplate default/too-big (document 1) would be refused: "
        'spec.spec.devices.requests[0].exactly.capacity.requests[memory]: Invalid value: "200Gi": '
        "must be at most 15Gi, the memory of the largest gpushare.dra.dev card in the cluster"
    )


def test_an_unknown_capacity_is_refused_not_pending() -> None:
    """A bandwidth request names a capacity no card has: refused, with the allowed names."""
    bad = template("fast")
    bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {"bandwidth": "10"}
    }
    (result,) = plan_of(dump(bad, pod("p", "fast")), policies=[Placement.BINPACK]).policies
    (planned,) = result.pods
    assert planned.outcome is Outcome.REFUSED
    assert 'Unsupported value: "bandwidth"' in (planned.reason or "")


def test_a_whole_card_leaves_no_room_for_a_share_on_a_one_card_node() -> None:
    """Scenario whole-card: a whole card takes all of it; a later share waits for it."""
    text = dump(
        template("whole"),
        template("share", cores="40", memory="5Gi"),
        pod("trainer", "whole"),
        pod("infer", "share"),
    )
    pods = _pods(
        plan_of(text, inventory="one-node-one-card", policies=[Placement.BINPACK]).policies[0]
    )
    whole = pods["trainer"].shares[0]
    assert (whole.cores, whole.memory) == (Fraction(100), Fraction(80 * GI))
    assert pods["infer"].outcome is Outcome.PENDING
    assert pods["infer"].fits_alone is True
    assert "node-1/gpu-0 has 0 cores, 0 memory free" in (pods["infer"].reason or "")


def test_two_shares_run_on_one_card_and_the_card_shows_their_sum() -> None:
    """Scenario sharing: 5Gi/40 and 5Gi/30 share one card: 70/100 cores, 10Gi of 80Gi used."""
    text = dump(
        template("a", cores="40", memory="5Gi"),
        template("b", cores="30", memory="5Gi"),
        pod("a", "a"),
        pod("b", "b"),
    )
    (result,) = plan_of(text, inventory="one-node-one-card", policies=[Placement.SPREAD]).policies
    assert [p.outcome for p in result.pods] == [Outcome.PLACED, Outcome.PLACED]
    (card,) = result.cards
    assert (len(card.shares), card.whole) == (2, False)
    assert (card.cores_used, card.card.cores) == (Fraction(70), Fraction(100))
    assert (card.memory_used, card.card.memory) == (Fraction(10 * GI), Fraction(80 * GI))


def test_a_shared_claim_is_allocated_once_and_pins_its_other_pods() -> None:
    """Pods naming one claim share its device; one on another node cannot join them."""
    text = dump(
        claim("team", cores="50", memory="4Gi"),
        pod("a", claims=["team"], node="node-2"),
        pod("b", claims=["team"]),
        pod("c", claims=["team"], node="node-1"),
    )
    result = plan_of(text, policies=[Placement.BINPACK]).policies[0]
    pods = _pods(result)
    assert pods["a"].node == pods["b"].node == "node-2"
    assert pods["a"].shares == pods["b"].shares
    assert pods["b"].shares[0].entry == "shared"
    assert sum(len(card.shares) for card in result.cards) == 1
    assert pods["c"].outcome is Outcome.PENDING
    assert "nodeSelector of the pod's allocated claims" in (pods["c"].reason or "")


def test_pods_without_claims_of_the_driver_are_not_ours() -> None:
    """A pod with no claims, or only claims of another driver's class, is not placed."""
    other = template("other", device_class="gpu.nvidia.com")
    other_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {},
    }
    text = dump(other_class, other, pod("plain"), pod("nvidia", "other"))
    result = plan_of(text, policies=[Placement.BINPACK]).policies[0]
    assert [p.outcome for p in result.pods] == [Outcome.NOT_OURS, Outcome.NOT_OURS]
    assert result.ours == 0


def test_a_misspelt_class_is_refused_instead_of_skipped() -> None:
    """A class that exists nowhere is reported by the engine as refused, naming the class."""
    text = dump(template("typo", device_class="gpushare.dra.devv"), pod("a", "typo"))
    (result,) = plan_of(text, policies=[Placement.BINPACK]).policies
    assert result.pods[0].outcome is Outcome.REFUSED
    assert "device class gpushare.dra.devv does not exist" in (result.pods[0].reason or "")


def test_device_classes_of_the_workload_join_the_cluster() -> None:
    """A DeviceClass defined in the file (second card only) is used by the engine."""
    by_bus = 'device.attributes["resource.kubernetes.io"].pciBusID == "0000:00:09.0"'
    second = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "second-card"},
        "spec": {
            "selectors": [
                {"cel": {"expression": f'device.driver == "{NAMES.driver}"'}},
                {"cel": {"expression": by_bus}},
            ]
        },
    }
    text = dump(
        second, template("t", device_class="second-card", cores="10", memory="1Gi"), pod("a", "t")
    )
    (result,) = plan_of(text, policies=[Placement.BINPACK]).policies
    assert result.pods[0].node == "node-2"
    assert result.pods[0].shares[0].pci_bus_id == "0000:00:09.0"


def test_each_policy_starts_from_the_same_cluster_and_plans_are_reproducible() -> None:
    """Planning binpack after spread gives what binpack alone gives, every time."""
    text = EXAMPLE.read_text()
    alone = plan_of(text, policies=[Placement.BINPACK]).policies[0]
    both = plan_of(text, policies=[Placement.SPREAD, Placement.BINPACK]).policies
    assert both[1] == alone
    assert both[0] != alone
    assert plan_of(text) == plan_of(text)


def test_replicas_fill_the_cluster_until_it_is_full() -> None:
    """Ten 5Gi/25-core replicas on three 15Gi cards: nine fit (45Gi in all), the tenth waits."""
    text = dump(template("t", cores="25", memory="5Gi"), deployment("d", 10, "t"))
    for result in plan_of(text).policies:
        outcomes = [p.outcome for p in result.pods]
        assert outcomes.count(Outcome.PLACED) == 9
        assert outcomes[-1] is Outcome.PENDING
        assert sum(card.memory_used for card in result.cards) == 45 * GI
