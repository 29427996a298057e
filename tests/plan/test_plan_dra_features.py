"""plan answers as the cluster would for an unhealthy (tainted) card and an admin-access claim."""

from __future__ import annotations

import dataclasses

from plan.builders import NAMES, dump, pod, template

from dra_driver.api import Placement
from dra_driver.nvml.inventory import Health, builtin_inventory
from dra_driver.plan.inventory import inventory_cluster
from dra_driver.plan.planner import Outcome, Plan, make_plan
from dra_driver.plan.workload import parse_workload

TOLERATION = {"key": "gpushare.dra.dev/unhealthy", "operator": "Exists", "effect": "NoSchedule"}


def _plan(text: str, *, failed_card: bool = False) -> Plan:
    """Plan ``text`` on one node with one card, that card marked unhealthy if asked."""
    inventory = builtin_inventory("one-node-one-card")
    if failed_card:
        (node,) = inventory.nodes
        card = dataclasses.replace(node.cards[0], health=Health.UNHEALTHY, health_message="XID 79")
        inventory = dataclasses.replace(
            inventory, nodes=(dataclasses.replace(node, cards=(card,)),)
        )
    cluster = inventory_cluster(NAMES, inventory, "inventory one-node-one-card")
    return make_plan(NAMES, cluster, parse_workload(text, "work.yaml"), [Placement.BINPACK])


def test_an_unhealthy_card_is_refused_to_a_share_unless_it_tolerates_the_taint() -> None:
    """The plain share waits naming the taint; the tolerating one is placed on the card."""
    tolerant = template("tolerant", cores="10", memory="1Gi")
    tolerant["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [TOLERATION]
    text = dump(
        template("plain", cores="10", memory="1Gi"),
        tolerant,
        pod("a", "plain"),
        pod("b", "tolerant"),
    )
    (result,) = _plan(text, failed_card=True).policies
    pods = {p.name: p for p in result.pods}
    assert pods["a"].outcome is Outcome.PENDING
    assert "gpu-0 tainted gpushare.dra.dev/unhealthy=xid-79:NoSchedule, not tolerated" in (
        pods["a"].reason or ""
    )
    assert pods["b"].outcome is Outcome.PLACED


def test_an_admin_access_claim_is_placed_on_a_full_card_and_counts_for_nothing() -> None:
    """An adminAccess monitor lands beside a whole-card claim; the card still shows one share."""
    monitor = template("monitor")
    monitor["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    text = dump(template("whole"), monitor, pod("trainer", "whole"), pod("watcher", "monitor"))
    (result,) = _plan(text).policies
    assert [p.outcome for p in result.pods] == [Outcome.PLACED, Outcome.PLACED]
    (card,) = result.cards
    assert (len(card.shares), card.cores_used) == (1, card.card.cores)
