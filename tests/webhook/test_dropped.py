"""The mutating webhook refuses capacity requests that the API server would drop."""

from __future__ import annotations

import dataclasses

import pytest
from controller.kit import node, slices_of
from webhook.kit import (
    LIMITS,
    NAMES,
    NVIDIA,
    FakeCluster,
    claim,
    claim_spec,
    request,
    response,
    review,
    template,
)

from dra_driver.webhook.admission import Admission
from dra_driver.webhook.capacity import limits_from_slices

PLAIN = limits_from_slices(slices_of([node("node-a", 2)], shared=False))
SHARE = {"cores": "30", "memory": "5Gi"}
MESSAGE = (
    "spec.spec.devices.requests[0].exactly.capacity: Forbidden: this cluster's API server drops "
    "capacity requests (the DRAConsumableCapacity feature gate is off), so the claim would "
    f"silently get a whole {NAMES.driver} card; enable DRAConsumableCapacity on kube-apiserver, "
    "kube-scheduler and the kubelets to share cards, or remove the capacity request to ask for "
    "a whole card"
)


def test_published_cards_say_whether_they_can_be_shared() -> None:
    """Plain devices read as not shareable, the usual ones as shareable, none as unknown."""
    assert PLAIN.shareable is False
    assert LIMITS.shareable is True
    assert limits_from_slices([]).shareable is None
    mixed = slices_of([node("node-a", 1)]) + slices_of([node("node-b", 1)], shared=False)
    assert limits_from_slices(mixed).shareable is True


def _mutate(obj: dict[str, object], limits: object) -> dict[str, object]:
    cluster = FakeCluster(limits_value=limits)  # type: ignore[arg-type]
    return response(Admission(NAMES, cluster).mutate(review(obj)).body)


def test_a_share_request_is_refused_where_every_card_is_whole_only() -> None:
    """A template asking 30 cores and 5Gi of our class is refused, naming the gate and fix."""
    answer = _mutate(template(claim_spec(request(capacity=SHARE))), PLAIN)
    assert answer["allowed"] is False
    assert answer["status"]["message"] == MESSAGE
    assert answer["status"]["code"] == 422


@pytest.mark.parametrize(
    ("obj", "limits"),
    [
        pytest.param(
            template(claim_spec(request(capacity=SHARE))),
            LIMITS,
            id="shareable-cluster",
        ),
        pytest.param(template(claim_spec(request())), PLAIN, id="whole-card-request"),
        pytest.param(
            claim(claim_spec(request(device_class=NVIDIA, capacity=SHARE))),
            PLAIN,
            id="other-driver",
        ),
        pytest.param(
            template(claim_spec(request(capacity=SHARE))),
            dataclasses.replace(PLAIN, shareable=None),
            id="no-card-known",
        ),
    ],
)
def test_what_the_api_server_keeps_is_let_through_unchanged(
    obj: dict[str, object], limits: object
) -> None:
    """Shareable clusters, whole-card requests, other drivers and unknown clusters pass as is."""
    answer = _mutate(obj, limits)
    assert answer["allowed"] is True
    assert "patch" not in answer
