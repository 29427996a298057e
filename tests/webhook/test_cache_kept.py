"""What the webhook's informers keep: what a review reads, and nothing that changes without it."""

from __future__ import annotations

import copy

from webhook.kit import SLICES, claim, claim_spec, request, share_template

from dra_driver.validation.capacity import limits_from_slices
from dra_driver.webhook.cache import Kept

RESULT = {"request": "gpu", "driver": "gpushare.dra.dev", "pool": "n1", "device": "gpu-0",
          "shareID": "0f0e0d0c-0000-4000-8000-000000000001"}  # fmt: skip
ALLOCATION = {"devices": {"results": [RESULT]}, "allocationTimestamp": "2026-11-28T10:00:00Z"}


def _lived_in(obj: dict, pod: str) -> dict:
    """Return ``obj`` as the API server stores it after an allocation and a reservation."""
    stored = copy.deepcopy(obj)
    stored["metadata"].update(uid="u-1", resourceVersion="7", managedFields=[{"manager": "x"}])
    stored["status"] = {
        "allocation": ALLOCATION,
        "reservedFor": [{"resource": "pods", "name": pod, "uid": "p-uid"}],
    }
    return stored


def test_a_kept_claim_has_its_spec_and_the_pods_it_is_reserved_for() -> None:
    """Spec and reserved pod names stay; allocation, managedFields and versions go."""
    whole = _lived_in(claim(claim_spec(request(capacity={"cores": "30"}))), "web-0")
    kept = Kept().claim(whole)
    assert kept["spec"] == whole["spec"]
    assert kept["status"] == {"reservedFor": [{"resource": "pods", "name": "web-0"}]}
    assert kept["metadata"] == {"name": "c", "namespace": "default", "uid": "u-1"}


def test_an_allocation_written_later_is_no_change_to_the_kept_claim() -> None:
    """The controller's allocation write leaves the kept claim equal: the informer drops it."""
    made = claim(claim_spec(request()))
    made["metadata"]["uid"] = "u-1"
    allocated = copy.deepcopy(made)
    allocated["status"] = {"allocation": ALLOCATION}
    allocated["metadata"]["resourceVersion"] = "9"
    kept = Kept()
    assert kept.claim(made) == kept.claim(allocated)


def test_claims_and_templates_of_one_spec_share_it() -> None:
    """Equal specs of different claims are one object in the cache."""
    kept = Kept()
    first = kept.claim(claim(claim_spec(request()), name="a"))
    second = kept.claim(claim(claim_spec(request()), name="b"))
    assert first["spec"] is second["spec"]
    assert kept.template(share_template())["spec"] == share_template()["spec"]


def test_kept_slices_give_the_same_limits_as_whole_ones() -> None:
    """Card memory, card count and sharing are read the same from what is kept."""
    kept = Kept()
    assert limits_from_slices(kept.slice(s) for s in SLICES) == limits_from_slices(SLICES)
    assert limits_from_slices(kept.slice(s) for s in SLICES).largest_memory is not None
