"""The webhook's capacity rules match what the plugin publishes; limits come from slices."""

from __future__ import annotations

import copy

from controller.kit import card
from webhook.kit import LIMITS, NAMES, SLICES

from dra_driver.api.fields import CORES, MAX_CORES, MEMORY
from dra_driver.k8s.quantity import parse_quantity
from dra_driver.publishing.slices import card_device
from dra_driver.validation.capacity import MEMORY_STEP, limits_from_slices


def test_constants_match_the_published_request_policy() -> None:
    """cores 0..100 step 1 and memory from 1Mi in 1Mi steps are what the plugin publishes."""
    capacity = card_device(card(0, "16Gi"), NAMES)["capacity"]
    assert set(capacity) == {CORES, MEMORY}
    cores = capacity[CORES]
    assert parse_quantity(cores["value"]) == MAX_CORES
    assert cores["requestPolicy"]["validRange"] == {"min": "0", "max": str(MAX_CORES), "step": "1"}
    memory_range = capacity[MEMORY]["requestPolicy"]["validRange"]
    assert (
        parse_quantity(memory_range["min"]) == parse_quantity(memory_range["step"]) == MEMORY_STEP
    )
    assert "max" not in memory_range


def test_limits_are_the_largest_card_and_the_fullest_node() -> None:
    """Four 16Gi cards on one node and two 80Gi on another: 80Gi and 4 cards."""
    assert (LIMITS.largest_memory, LIMITS.most_cards) == (80 * 2**30, 4)


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    """A stale slice of an older generation (a removed 80Gi card) no longer raises the limits."""
    current = [s for s in SLICES if s["spec"]["pool"]["name"] == "node-a"]
    stale = copy.deepcopy([s for s in SLICES if s["spec"]["pool"]["name"] == "node-b"])
    newer = copy.deepcopy(stale)
    for resource_slice in newer:
        resource_slice["spec"]["pool"]["generation"] = 2
        resource_slice["spec"]["devices"] = resource_slice["spec"]["devices"][:1]
        resource_slice["spec"]["devices"][0]["capacity"][MEMORY]["value"] = "40Gi"
    limits = limits_from_slices([*current, *stale, *newer])
    assert (limits.largest_memory, limits.most_cards) == (40 * 2**30, 4)


def test_slices_without_cards_say_nothing() -> None:
    """Pools that publish no device (no healthy card yet) leave both limits unknown."""
    empty = copy.deepcopy(SLICES[0])
    empty["spec"]["devices"] = []
    limits = limits_from_slices([empty])
    assert (limits.largest_memory, limits.most_cards) == (None, None)
