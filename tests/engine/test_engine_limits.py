"""The API's limit of 32 devices per claim allocation, applied as kube-scheduler applies it."""

from __future__ import annotations

from controller.kit import claim, cluster, first_available, node, pod, request, share_ids

from dra_driver.engine import Placed, Policy, Unplaceable, place_pod


def decide(cards: int, *requests: dict) -> Placed | Unplaceable:
    """Place one claim with ``requests`` on a node of ``cards`` cards."""
    snapshot = cluster(node("n", cards))
    return place_pod(snapshot, pod(), [claim("big", *requests)], Policy(), share_id=share_ids())


def test_a_claim_asking_for_more_than_32_devices_is_refused():
    """Three requests of 12 cards need 36 results: refused as written, naming the limit."""
    decision = decide(40, *(request(f"r{i}", count=12, cores="1", memory="1Gi") for i in range(3)))
    assert isinstance(decision, Unplaceable)
    assert decision.refused
    assert "at least 36 devices; an allocation can list at most 32" in decision.reason


def test_first_available_falls_back_to_an_alternative_under_the_limit():
    """20 cards plus a first choice of 16 is 36: the request takes its 4-card alternative."""
    fallback = first_available(
        "b",
        request("many", count=16, cores="1", memory="1Gi"),
        request("few", count=4, cores="1", memory="1Gi"),
    )
    decision = decide(40, request("a", count=20, cores="1", memory="1Gi"), fallback)
    assert isinstance(decision, Placed)
    results = decision.claims[0].results
    assert len(results) == 24
    assert {r["request"] for r in results} == {"a", "b/few"}


def test_all_mode_over_the_limit_fails_on_the_node():
    """allocationMode All on 40 matching cards would list 40 devices: it does not fit."""
    decision = decide(40, request("every", all_devices=True, cores="1", memory="1Gi"))
    assert isinstance(decision, Unplaceable)
    assert not decision.refused
    assert "the claim would list 40 devices, and an allocation can list at most 32" in (
        decision.reason
    )


def test_exactly_32_devices_fit():
    """The limit is inclusive: 32 results are allowed."""
    decision = decide(40, request("a", count=32, cores="1", memory="1Gi"))
    assert isinstance(decision, Placed)
    assert len(decision.claims[0].results) == 32
