"""How one device is judged as kube-scheduler judges it: unshared capacity, typed attributes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from controller.kit import DRIVER, claim, cluster, node, pod, request, share_ids, slices_of

from dra_driver.engine import Placed, Policy, Unplaceable, place_pod

Object = dict[str, Any]


def one_node(devices: list[Object]) -> list[Object]:
    """Return node ``n``'s slice with ``devices`` instead of the plugin's cards."""
    (slice_,) = slices_of([node("n", 1)])
    slice_["spec"]["devices"] = devices
    return [slice_]


def card_entry(name: str, **attributes: Object) -> Object:
    """Return one of the plugin's card entries renamed, with extra raw attributes."""
    (slice_,) = slices_of([node("n", 1)])
    entry = copy.deepcopy(slice_["spec"]["devices"][0])
    entry["name"] = name
    entry["attributes"].update(attributes)
    return entry


def decide(devices: list[Object], *claims: Object) -> Placed | Unplaceable:
    """Place ``claims`` on node ``n`` holding ``devices``."""
    snapshot = cluster(node("n", 0), slices=one_node(devices))
    return place_pod(snapshot, pod(), list(claims), Policy(), share_id=share_ids())


def test_an_unshared_device_smaller_than_the_request_is_not_used():
    """A device that may not be shared is skipped when the request exceeds its capacity."""
    unshared = card_entry("gpu-0")
    del unshared["allowMultipleAllocations"]
    too_big = decide([unshared], claim("a", request(cores="10", memory="20Gi")))
    assert isinstance(too_big, Unplaceable)
    assert "request memory 20Gi exceeds the device's 16Gi" in too_big.reason
    fits = decide([unshared], claim("a", request(cores="10", memory="8Gi")))
    assert isinstance(fits, Placed)
    assert "shareID" not in fits.claims[0].results[0]


@pytest.mark.parametrize(
    ("first", "second", "together"),
    [
        ({"int": 1}, {"int": 1}, True),
        ({"int": 1}, {"bool": True}, False),
        ({"string": "1.0.0"}, {"version": "1.0.0"}, False),
        ({"version": "1.0.0"}, {"version": "1.0.0"}, True),
    ],
)
def test_match_attribute_compares_typed_values(first: Object, second: Object, together: bool):
    """matchAttribute holds only for equal values of one type: true is not 1."""
    devices = [card_entry("gpu-0", x=first), card_entry("gpu-1", x=second)]
    both = claim(
        "a",
        request("one", cores="60", memory="9Gi"),
        request("two", cores="60", memory="9Gi"),
        constraints=[{"matchAttribute": f"{DRIVER}/x"}],
    )
    assert isinstance(decide(devices, both), Placed) is together
