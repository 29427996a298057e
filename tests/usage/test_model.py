"""Card usage: one count of what each published card holds, for status, plan and simulate."""

from __future__ import annotations

from fractions import Fraction

from ops.builders import NAMES, claim, share, whole

from dra_driver.nvml.inventory import builtin_inventory
from dra_driver.plan.inventory import node_slices
from dra_driver.publishing.slicesync import with_generation
from dra_driver.usage.model import card_uses, published_cards
from dra_driver.usage.render import (
    card_identity,
    card_json,
    columns,
    cores_of_total,
    memory_of_total,
)

GI = 2**30
SLICES = [s for node in builtin_inventory("qgpu-runbook").nodes for s in node_slices(NAMES, node)]
OTHER_SHARE = "7d3f1c2a-0000-4000-8000-000000000009"


def test_every_published_card_is_listed_once_in_node_order() -> None:
    """Three T4s of qgpu-runbook, sorted by node and device, with their published totals."""
    uses = card_uses(NAMES, SLICES, [])
    assert [(u.card.node, u.card.device) for u in uses] == [
        ("node-1", "gpu-0"),
        ("node-2", "gpu-0"),
        ("node-2", "gpu-1"),
    ]
    assert all(u.card.cores == 100 and u.card.uuid.startswith("GPU-") for u in uses)
    assert all(not u.shares and u.cores_free == u.card.cores for u in uses)


def test_shares_add_up_and_a_whole_allocation_takes_everything() -> None:
    """Two shares sum their consumed capacity; a result without a share ID holds the card."""
    claims = [
        claim("a", results=[share("gpu-0", "30", "4Gi")], pods=("pa",)),
        claim("b", results=[share("gpu-0", "40", "2Gi", OTHER_SHARE)], pods=("pb",)),
        claim("w", results=[whole("gpu-1")], pods=("pw",)),
    ]
    uses = {u.card.device: u for u in card_uses(NAMES, SLICES, claims) if u.card.node == "node-2"}
    shared, held = uses["gpu-0"], uses["gpu-1"]
    assert (shared.cores_used, shared.memory_used, shared.whole) == (70, 6 * GI, False)
    assert [s.claim for s in shared.shares] == ["default/a", "default/b"]
    assert shared.shares[0].pods == ("pa",)
    assert (held.whole, held.cores_used, held.cores_free, held.memory_free) == (True, 100, 0, 0)


def test_admin_access_and_other_drivers_take_nothing() -> None:
    """An admin-access result and another driver's result leave the card free."""
    admin = {**share("gpu-0", "30", "4Gi"), "adminAccess": True}
    foreign = {**share("gpu-0", "30", "4Gi"), "driver": "other.example.com"}
    claims = [claim("a", results=[admin]), claim("f", results=[foreign])]
    assert all(not u.shares for u in card_uses(NAMES, SLICES, claims))


def test_only_the_newest_slice_generation_of_a_pool_counts() -> None:
    """A pool's older generation, being replaced by the plugin, adds no card twice."""
    newer = [with_generation(s, 2) for s in SLICES if s["spec"]["pool"]["name"] == "node-2"]
    cards = published_cards([*SLICES, *newer], NAMES.driver)
    assert len(cards) == 3


def test_one_rendering_for_every_command() -> None:
    """used/total cells, padded columns, and the JSON every tool prints for a card."""
    (use,) = [
        u
        for u in card_uses(NAMES, SLICES, [claim("a", results=[share("gpu-0", "30", "4Gi")])])
        if u.shares
    ]
    assert (cores_of_total(use), memory_of_total(use)) == ("30/100", "4Gi/15Gi")
    document = card_json(use)
    assert (document["shares"], document["whole"]) == (1, False)
    assert document["cores"] == {"used": "30", "total": "100"}
    assert columns([["A", "BB"], ["ccc", "d"]]) == ["A    BB", "ccc  d"]
    assert use.cores_free == Fraction(70)


def test_card_identity_names_the_card_first_in_card_json() -> None:
    """card_identity is the node, device and UUID, and card_json's document begins with them."""
    use = card_uses(NAMES, SLICES, [])[0]
    identity = card_identity(use.card)
    assert identity == {"node": "node-1", "device": "gpu-0", "uuid": use.card.uuid}
    assert list(card_json(use).items())[:3] == list(identity.items())
