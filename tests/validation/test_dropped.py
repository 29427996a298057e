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
    classes,
    config,
    exactly,
    request,
    response,
    review,
    template,
)

from dra_driver.api import decode_config
from dra_driver.k8s.quantity import parse_quantity
from dra_driver.validation.capacity import limits_from_slices
from dra_driver.validation.dropped import dropped_capacity
from dra_driver.webhook.admission import Admission

PLAIN = limits_from_slices(slices_of([node("node-a", 2)], shared=False))
SHARE = {"cores": "30", "memory": "5Gi"}
MESSAGE = (
    "spec.spec.devices.requests[0].exactly.capacity: Forbidden: this cluster's API server drops "
    "capacity requests (the DRAConsumableCapacity feature gate is off), so the claim would "
    f"silently get a whole {NAMES.driver} card; to share cards, give the share's size in the "
    'claim\'s GpuShareConfig for request "gpu" instead (cores: 30, memory: 5Gi), or enable '
    "DRAConsumableCapacity on kube-apiserver, kube-scheduler and the kubelets; to ask for a "
    "whole card, remove the capacity request"
)
GENERIC_CORES = "cores: <per cent of the card's SMs, 0 to 100>"
GENERIC_MEMORY = "memory: <a whole number of Mi, Gi or Ti, such as 5Gi>"


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


def _advice(spec: dict[str, object]) -> str:
    """Return the config sizes the refusal suggests for the spec's only capacity request."""
    errors = dropped_capacity(spec, path="spec", names=NAMES, classes=classes(), limits=PLAIN)
    assert len(errors) == 1
    return errors[0].split(" instead (", 1)[1].split("), or enable", 1)[0]


@pytest.mark.parametrize(
    ("capacity", "advice"),
    [
        pytest.param({"memory": "5120Mi"}, "memory: 5Gi", id="memory-alone-in-its-largest-unit"),
        pytest.param({"cores": "100", "memory": "1Mi"}, "cores: 100, memory: 1Mi", id="edges"),
        pytest.param({"memory": "3G"}, GENERIC_MEMORY, id="decimal-memory-off-the-MiB-grid"),
        pytest.param({"memory": "1536Ki"}, GENERIC_MEMORY, id="memory-below-a-whole-MiB"),
        pytest.param({"cores": "12500m"}, GENERIC_CORES, id="fractional-cores"),
        pytest.param({"cores": "150"}, GENERIC_CORES, id="cores-over-100"),
        pytest.param({"cores": "0", "memory": "0"}, f"cores: 0, {GENERIC_MEMORY}", id="zeros"),
        pytest.param({"memory": "100000000Ti"}, GENERIC_MEMORY, id="more-than-the-config-takes"),
        pytest.param({"gpus": "1"}, f"{GENERIC_CORES}, {GENERIC_MEMORY}", id="no-known-name"),
    ],
)
def test_the_refusal_shows_the_config_sizes_only_when_they_convert_exactly(
    capacity: dict[str, str], advice: str
) -> None:
    """Exact amounts become config values the decoder takes back; others get generic advice."""
    assert _advice(claim_spec(request(capacity=capacity))) == advice
    if "<" not in advice:
        sizes = dict(line.split(": ") for line in advice.split(", "))
        decoded = decode_config(config(**sizes)["opaque"]["parameters"], NAMES)
        for name, text in capacity.items():
            assert getattr(decoded, name) == parse_quantity(text)


def test_the_refusal_names_a_first_available_alternative() -> None:
    """A sub-request's refusal points at its own path and its result name for the config."""
    spec = claim_spec(
        {"name": "gpu", "firstAvailable": [{"name": "small", **exactly(capacity=SHARE)}]}
    )
    (error,) = dropped_capacity(spec, path="spec", names=NAMES, classes=classes(), limits=PLAIN)
    assert error.startswith("spec.devices.requests[0].firstAvailable[0].capacity: Forbidden: ")
    assert 'GpuShareConfig for request "gpu/small" instead (cores: 30, memory: 5Gi)' in error
