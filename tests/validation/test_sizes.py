"""Share sizes in a GpuShareConfig: checked like capacity requests, never given twice."""

from __future__ import annotations

import pytest
from webhook.kit import (
    DRIVER,
    LIMITS,
    NAMES,
    FakeCluster,
    Object,
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

from dra_driver.api.classes import device_class
from dra_driver.validation.capacity import Limits
from dra_driver.validation.claimspec import validate_claim_spec
from dra_driver.validation.sizes import ONE_PLACE
from dra_driver.webhook.admission import Admission

SIZED = f"sized.{DRIVER}"
HUGE = f"huge.{DRIVER}"
PARAMS = "spec.devices.config[0].opaque.parameters"
LARGEST = f"must be at most 80Gi, the memory of the largest {DRIVER} card in the cluster"
SMALL = {"cores": "30", "memory": "5Gi"}


def _class_with(name: str, **fields: str) -> Object:
    made = device_class(name, NAMES)
    made["spec"]["config"] = [{"opaque": config(**fields)["opaque"]}]
    return made


def _classes() -> dict[str, Object]:
    return {
        **classes(),
        SIZED: _class_with(SIZED, cores="20"),
        HUGE: _class_with(HUGE, memory="100Gi"),
    }


def _errors(spec: Object, limits: Limits = LIMITS) -> list[str]:
    return validate_claim_spec(spec, path="spec", names=NAMES, classes=_classes(), limits=limits)


def _first_available(*alternatives: Object) -> Object:
    return {"name": "gpu", "firstAvailable": list(alternatives)}


def _conflict(where: str, sets: str) -> str:
    return f"{where}.capacity: Forbidden: the request's GpuShareConfig sets {sets}; {ONE_PLACE}"


def test_a_claim_sized_by_its_config_is_admitted() -> None:
    """30 cores and 5Gi in the config, no capacity request: the validating webhook allows it."""
    spec = claim_spec(request(), configs=[config(isolation="fixed-share", **SMALL)])
    for obj in (claim(spec), template(spec)):
        answer = response(Admission(NAMES, FakeCluster()).validate(review(obj)).body)
        assert answer["allowed"] is True, answer


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        pytest.param(
            claim_spec(request(capacity={"cores": "30"}), configs=[config(memory="5Gi")]),
            _conflict("spec.devices.requests[0].exactly", f"memory ({PARAMS}.memory)"),
            id="exactly-claim-config",
        ),
        pytest.param(
            claim_spec(request(device_class=SIZED, capacity={"memory": "5Gi"})),
            _conflict(
                "spec.devices.requests[0].exactly",
                f'cores (spec.config[0].opaque.parameters.cores of DeviceClass "{SIZED}")',
            ),
            id="exactly-class-config",
        ),
        pytest.param(
            claim_spec(
                request(device_class=SIZED, capacity=SMALL),
                configs=[config(["gpu"], memory="5Gi")],
            ),
            _conflict(
                "spec.devices.requests[0].exactly",
                f'cores (spec.config[0].opaque.parameters.cores of DeviceClass "{SIZED}") and '
                f"memory ({PARAMS}.memory)",
            ),
            id="exactly-both-sources",
        ),
        pytest.param(
            claim_spec(
                _first_available(
                    {"name": "small", **exactly(capacity=SMALL)},
                    {"name": "whole", **exactly()},
                ),
                configs=[config(["gpu/small"], cores="30")],
            ),
            _conflict("spec.devices.requests[0].firstAvailable[0]", f"cores ({PARAMS}.cores)"),
            id="first-available-claim-config",
        ),
        pytest.param(
            claim_spec(
                _first_available(
                    {"name": "whole", **exactly()},
                    {"name": "small", **exactly(SIZED, capacity={"memory": "5Gi"})},
                )
            ),
            _conflict(
                "spec.devices.requests[0].firstAvailable[1]",
                f'cores (spec.config[0].opaque.parameters.cores of DeviceClass "{SIZED}")',
            ),
            id="first-available-class-config",
        ),
    ],
)
def test_a_size_in_both_capacity_and_config_is_refused(spec: Object, error: str) -> None:
    """Capacity requests plus config cores/memory from the class or the claim: one error."""
    assert _errors(spec) == [error]


def test_config_sizes_for_another_request_do_not_conflict() -> None:
    """A config that names request b sizes only b; a's capacity requests stand alone."""
    spec = claim_spec(request("a", capacity=SMALL), request("b"), configs=[config(["b"], **SMALL)])
    assert _errors(spec) == []


@pytest.mark.parametrize(
    ("memory", "limits", "errors"),
    [
        pytest.param("80Gi", LIMITS, [], id="the-largest-card"),
        pytest.param("81920Mi", LIMITS, [], id="the-largest-card-in-Mi"),
        pytest.param(
            "102400Mi",
            LIMITS,
            [f'{PARAMS}.memory: Invalid value: "102400Mi": {LARGEST}'],
            id="beyond-as-written",
        ),
        pytest.param("1Ti", Limits(), [], id="no-card-known"),
    ],
)
def test_config_memory_is_held_to_the_largest_card(
    memory: str, limits: Limits, errors: list[str]
) -> None:
    """Config memory beyond every card is refused at its field, with the value as written."""
    assert _errors(claim_spec(request(), configs=[config(memory=memory)]), limits) == errors


def test_config_memory_for_two_requests_is_refused_once() -> None:
    """One config entry too large for every card, applying to two requests: one error."""
    spec = claim_spec(request("a"), request("b"), configs=[config(memory="1Ti")])
    assert _errors(spec) == [f'{PARAMS}.memory: Invalid value: "1Ti": {LARGEST}']


def test_class_memory_beyond_every_card_is_refused_unless_the_claim_overrides_it() -> None:
    """A class's 100Gi refuses its requests; the claim's own 5Gi wins the merge and is admitted."""
    assert _errors(claim_spec(request(device_class=HUGE))) == [
        f'spec.devices.requests[0].exactly.deviceClassName: Invalid value: "{HUGE}": its '
        f'config\'s memory "100Gi" (spec.config[0].opaque.parameters.memory) {LARGEST}'
    ]
    assert _errors(claim_spec(request(device_class=HUGE), configs=[config(memory="5Gi")])) == []


def test_a_first_available_alternative_too_large_by_config_is_skipped() -> None:
    """As with capacity, only when every alternative's config memory fits no card is it refused."""
    big = {"name": "big", **exactly()}
    small = {"name": "small", **exactly()}
    one_too_large = claim_spec(
        _first_available(big, small), configs=[config(["gpu/big"], memory="1Ti")]
    )
    assert _errors(one_too_large) == []
    all_too_large = claim_spec(
        _first_available(big, small), configs=[config(["gpu"], memory="1Ti")]
    )
    assert _errors(all_too_large) == [f'{PARAMS}.memory: Invalid value: "1Ti": {LARGEST}']


def test_a_claim_generated_for_a_pod_is_not_held_to_the_cards_published_now() -> None:
    """Like capacity requests, a pod's generated claim's config memory is not checked again."""
    obj = claim(claim_spec(request(), configs=[config(memory="1Ti")]))
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}
    ]
    answer = response(Admission(NAMES, FakeCluster()).validate(review(obj)).body)
    assert answer["allowed"] is True


def test_config_cores_count_for_what_the_backend_can_enforce() -> None:
    """fixed-share with 0 cores from the config is refused by hami-core as from capacity."""
    policy = {"backend": "hami-core", "isolation": "fixed-share"}
    by_capacity = _errors(claim_spec(request(capacity={"cores": "0"}), configs=[config(**policy)]))
    by_config = _errors(claim_spec(request(), configs=[config(cores="0", **policy)]))
    assert by_config == by_capacity
    assert by_config[0].startswith(
        'spec.devices.requests[0].exactly: Forbidden: backend "hami-core": isolation '
        '"fixed-share": request "gpu" has 0 cores'
    )
    assert _errors(claim_spec(request(), configs=[config(cores="1", **policy)])) == []


def test_exclusive_with_a_partial_size_is_judged_the_same_wherever_the_size_is() -> None:
    """exclusive with 30 cores: the webhook says the same for capacity and config sizes."""
    by_capacity = _errors(
        claim_spec(request(capacity=SMALL), configs=[config(isolation="exclusive")])
    )
    by_config = _errors(claim_spec(request(), configs=[config(isolation="exclusive", **SMALL)]))
    assert by_config == by_capacity


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        pytest.param(
            {"cores": "150"},
            f'{PARAMS}.cores: Invalid value: "150": must be a whole number from 0 to 100 (per '
            'cent of the card\'s SMs), such as 30 or "30"',
            id="cores-over-100",
        ),
        pytest.param(
            {"memory": "5G"},
            f'{PARAMS}.memory: Invalid value: "5G": must be a whole number of Mi, Gi or Ti (at '
            "least 1Mi), such as 512Mi or 5Gi",
            id="memory-decimal-unit",
        ),
    ],
)
def test_a_malformed_config_size_is_refused_at_its_field(
    fields: dict[str, str], error: str
) -> None:
    """The webhook refuses config sizes the decoder refuses, naming the parameter's path."""
    assert _errors(claim_spec(request(), configs=[config(**fields)])) == [error]
