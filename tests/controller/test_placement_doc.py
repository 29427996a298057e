"""The worked example of docs/placement.md, run through the engine so the document cannot rot."""

from __future__ import annotations

from fractions import Fraction

import pytest
from controller.kit import (
    NAMES,
    card,
    claim,
    cluster,
    commit,
    config,
    node,
    pod,
    request,
    share_ids,
)

from dra_driver.api import Placement
from dra_driver.engine import Placed, Policy, place_pod
from dra_driver.engine.scoring import free_fraction


def runbook_node_2() -> object:
    """Return node-2 of the qGPU runbook: two 15 GiB T4s, a 40-core/5Gi online share on gpu-0."""
    snapshot = cluster(
        node("node-2", [card(0, "15360Mi", node="node-2"), card(1, "15360Mi", node="node-2")])
    )
    first = claim("first", request(cores="40", memory="5Gi"), configs=[config(placement="binpack")])
    decision = place_pod(snapshot, pod(), [first], Policy(), share_id=share_ids())
    assert isinstance(decision, Placed)
    commit(snapshot, [first], decision)
    return snapshot


@pytest.mark.parametrize(("placement", "device"), [("binpack", "gpu-0"), ("spread", "gpu-1")])
def test_online_share_goes_where_the_document_says(placement, device):
    """binpack puts 30 cores/5Gi beside the first share (19/60 free), spread on the idle card."""
    snapshot = runbook_node_2()
    share = claim("new", request(cores="30", memory="5Gi"), configs=[config(placement=placement)])
    decision = place_pod(snapshot, pod(), [share], Policy(), share_id=share_ids())
    assert isinstance(decision, Placed)
    assert decision.claims[0].results[0]["device"] == device


def test_free_fractions_of_the_table():
    """The table's free fractions after placement are 19/60 and 41/60."""
    snapshot = runbook_node_2()
    gpu0, gpu1 = snapshot.devices["node-2"]
    gi = 2**30
    assert free_fraction(
        gpu0.capacities, {"cores": Fraction(30), "memory": Fraction(5 * gi)}
    ) == Fraction(19, 60)
    assert free_fraction(
        gpu1.capacities, {"cores": Fraction(70), "memory": Fraction(10 * gi)}
    ) == Fraction(41, 60)


def test_offline_share_joins_the_online_card_even_under_spread():
    """An offline spread share goes to the card with online work, not to the idle card."""
    snapshot = runbook_node_2()
    offline = claim(
        "batch",
        request(cores="20", memory="2Gi", device_class=NAMES.offline_device_class),
        configs=[config(placement="spread")],
    )
    decision = place_pod(snapshot, pod(), [offline], Policy(), share_id=share_ids())
    assert isinstance(decision, Placed)
    assert decision.claims[0].results[0]["device"] == "gpu-0"


@pytest.mark.parametrize(
    ("placement", "chosen"), [(Placement.BINPACK, "node-2"), (Placement.SPREAD, "node-1")]
)
def test_node_level_choice(placement, chosen):
    """Node binpack prefers the busy node-2, node spread the idle node-1."""
    snapshot = runbook_node_2()
    both = cluster(
        node("node-1", [card(0, "15360Mi", node="node-1")]),
        node("node-2", [card(0, "15360Mi", node="node-2"), card(1, "15360Mi", node="node-2")]),
        claims=list(snapshot.counted.values()),
    )
    share = claim("new", request(cores="10", memory="1Gi"))
    decision = place_pod(both, pod(), [share], Policy(node=placement), share_id=share_ids())
    assert isinstance(decision, Placed)
    assert decision.node == chosen
