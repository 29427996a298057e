"""Consumable-capacity arithmetic matches kube-scheduler's consumable_capacity.go."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.k8s.quantity import parse_quantity
from dra_driver.structured.consumable import (
    Capacity,
    CapacityPolicy,
    CapacityRejected,
    consumed_capacity,
    format_consumed,
    parse_capacities,
)

MI = 1024**2
GI = 1024**3


def card(memory: str = "16Gi") -> dict[str, Any]:
    """Build a shareable card as our kubelet plugin publishes it (and as HAMi does)."""
    return {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "capacity": {
            "cores": {
                "value": "100",
                "requestPolicy": {
                    "default": "100",
                    "validRange": {"min": "0", "max": "100", "step": "1"},
                },
            },
            "memory": {
                "value": memory,
                "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "step": "1Mi"}},
            },
        },
    }


def memory(value: str, policy: dict[str, Any]) -> dict[str, Any]:
    """Build a raw device with one ``memory`` capacity under ``policy``."""
    return {"capacity": {"memory": {"value": value, "requestPolicy": policy}}}


def one(value: str, policy: dict[str, Any] | None = None) -> dict[str, Capacity]:
    """Parse a device with a single capacity ``x``."""
    entry: dict[str, Any] = {"value": value}
    if policy is not None:
        entry["requestPolicy"] = policy
    return parse_capacities({"capacity": {"x": entry}})


def q(**requests: str) -> dict[str, Fraction]:
    return {name: parse_quantity(text) for name, text in requests.items()}


CARD_CASES = [
    ("shares as requested", q(cores="30", memory="5Gi"), {"cores": 30, "memory": 5 * GI}),
    ("no request takes the defaults", {}, {"cores": 100, "memory": 16 * GI}),
    ("only cores: memory default", q(cores="10"), {"cores": 10, "memory": 16 * GI}),
    ("zero cores is min, kept", q(cores="0", memory="1Gi"), {"cores": 0, "memory": GI}),
    (
        "decimal bytes round up a Mi",
        q(cores="1", memory="5000000000"),
        {"cores": 1, "memory": 4769 * MI},
    ),
    ("below min is min", q(cores="1", memory="1"), {"cores": 1, "memory": MI}),
    ("zero memory is min", q(cores="1", memory="0"), {"cores": 1, "memory": MI}),
    ("exactly on a step stays", q(cores="100", memory="2Mi"), {"cores": 100, "memory": 2 * MI}),
    ("1.5Mi rounds to 2Mi", q(cores="1", memory="1536Ki"), {"cores": 1, "memory": 2 * MI}),
    ("fractional cores round up", q(cores="99.5"), {"cores": 100, "memory": 16 * GI}),
    ("memory has no max: 64Gi", q(memory="64Gi"), {"cores": 100, "memory": 64 * GI}),
]


@pytest.mark.parametrize(
    ("requests", "expected"), [c[1:] for c in CARD_CASES], ids=[c[0] for c in CARD_CASES]
)
def test_card_requests_round_like_the_scheduler(
    requests: dict[str, Fraction], expected: dict[str, int]
) -> None:
    """Requests on the cores/memory card give the exact amounts the scheduler would consume."""
    assert consumed_capacity(parse_capacities(card()), requests) == expected


RANGE_CASES = [
    # Each: the policy, the request, what it consumes.
    ({"default": "10", "validRange": {"min": "10", "step": "4"}}, "11", 14),
    ({"default": "10", "validRange": {"min": "10", "step": "4"}}, "14", 14),
    ({"default": "10", "validRange": {"min": "10", "step": "4"}}, "15", 18),
    ({"default": "10", "validRange": {"min": "10", "step": "4"}}, "3", 10),
    ({"default": "10", "validRange": {"min": "10", "max": "50"}}, "17", 17),
    ({"default": "10", "validRange": {"min": "10", "max": "50"}}, "5", 10),
    ({"default": "10", "validRange": {"min": "10", "max": "50"}}, "50", 50),
    ({"default": "1Gi", "validValues": ["1Gi", "2Gi", "4Gi"]}, "1", GI),
    ({"default": "1Gi", "validValues": ["1Gi", "2Gi", "4Gi"]}, "2Gi", 2 * GI),
    ({"default": "1Gi", "validValues": ["1Gi", "2Gi", "4Gi"]}, "3Gi", 4 * GI),
    ({"default": "3"}, "7", 7),
    ({"default": "3", "validValues": []}, "7", 7),
]
RANGE_IDS = [
    "step counts from min, not zero",
    "on a step from min stays",
    "just past a step goes to the next",
    "below min is min",
    "no step: any value in range stays",
    "no step: below min is min",
    "no step: max itself fits",
    "valid values: smallest that covers",
    "valid values: exact",
    "valid values: next up",
    "default-only policy takes the request as is",
    "empty validValues counts as absent, as in the scheduler",
]


@pytest.mark.parametrize(("policy", "request_", "consumed"), RANGE_CASES, ids=RANGE_IDS)
def test_policies_round_up_to_the_next_allowed_amount(
    policy: dict[str, Any], request_: str, consumed: int
) -> None:
    """validRange rounds up to min + n*step (min if below), validValues to the next listed value."""
    assert consumed_capacity(one("8Gi", policy), q(x=request_)) == {"x": consumed}


REJECTIONS = [
    (card(), q(cores="150"), "request cores 150 exceeds max 100"),
    (card(), q(cores="100.5"), "request cores 100500m, rounded up to 101, exceeds max 100"),
    (card(), q(bandwidth="1"), 'device has no capacity "bandwidth"'),
    (card(), q(zeta="1", alpha="1"), 'device has no capacity "alpha"'),
    (
        memory(
            "90Gi", {"default": "1Gi", "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"}}
        ),
        q(memory="90Gi"),
        "request memory 90Gi exceeds max 80Gi",
    ),
    (
        memory("8Gi", {"default": "1Gi", "validValues": ["1Gi", "2Gi", "4Gi"]}),
        q(memory="5Gi"),
        "request memory 5Gi exceeds the largest valid value 4Gi",
    ),
]


@pytest.mark.parametrize(
    ("device", "requests", "message"),
    REJECTIONS,
    ids=["above max", "rounded above max", "unknown", "first unknown", "binary max", "values"],
)
def test_requests_outside_the_policy_are_rejected_with_the_reason(
    device: dict[str, Any], requests: dict[str, Fraction], message: str
) -> None:
    """Above max (after rounding), above every valid value, or an unknown capacity: rejected."""
    with pytest.raises(CapacityRejected) as caught:
        consumed_capacity(parse_capacities(device), requests)
    assert str(caught.value) == message


def test_without_a_policy_no_request_takes_the_whole_value_and_a_request_is_kept() -> None:
    """No policy: no request consumes the full value; a request is taken as is, even above it."""
    capacities = parse_capacities({"capacity": {"a": {"value": "5"}, "b": {"value": "2Gi"}}})
    assert consumed_capacity(capacities, {}) == {"a": 5, "b": 2 * GI}
    assert consumed_capacity(capacities, q(a="7")) == {"a": 7, "b": 2 * GI}


def test_no_request_under_a_policy_consumes_its_default_not_the_value() -> None:
    """With a policy, an unrequested capacity consumes the default; without one, the value."""
    assert consumed_capacity(one("8Gi", {"default": "1Gi", "validValues": ["1Gi"]}), {}) == {
        "x": GI
    }
    assert consumed_capacity(one("8Gi", {"default": "3"}), {}) == {"x": 3}
    assert consumed_capacity(one("8Gi", {}), {}) == {"x": 8 * GI}


def test_every_capacity_appears_in_the_result_zeros_included() -> None:
    """The result names each capacity of the device, including those consuming zero."""
    capacities = parse_capacities(card())
    result = consumed_capacity(capacities, q(cores="0", memory="1Mi"))
    assert result == {"cores": 0, "memory": MI}
    assert list(result) == list(capacities)
    assert consumed_capacity({}, {}) == {}


def test_slice_capacities_parse_into_values_policies_and_text() -> None:
    """parse_capacities keeps the value's text and every policy field as exact fractions."""
    capacities = parse_capacities(card())
    assert capacities["cores"] == Capacity(
        Fraction(100),
        CapacityPolicy(Fraction(100), None, Fraction(0), Fraction(100), Fraction(1)),
        "100",
    )
    assert capacities["memory"] == Capacity(
        Fraction(16 * GI),
        CapacityPolicy(Fraction(16 * GI), None, Fraction(MI), None, Fraction(MI)),
        "16Gi",
    )
    values = one("8Gi", {"default": "1Gi", "validValues": ["1Gi", "2Gi"]})["x"].policy
    assert values == CapacityPolicy(
        Fraction(GI), (Fraction(GI), Fraction(2 * GI)), None, None, None
    )
    assert parse_capacities({"name": "bare"}) == {}
    assert one("1")["x"].policy is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"value": "lots"}, "capacity 'x': quantity 'lots' must match"),
        ({}, "capacity 'x': missing field 'value'"),
        ({"value": "1", "requestPolicy": {"validRange": {"max": "1"}}}, "validRange needs min"),
        (
            {"value": "1", "requestPolicy": {"validRange": {"min": "0", "step": "0"}}},
            "step must be positive",
        ),
        ({"value": "1", "requestPolicy": {"default": "1x"}}, "capacity 'x': quantity '1x'"),
    ],
    ids=["value", "no value", "no min", "zero step", "default"],
)
def test_malformed_capacities_raise_naming_the_capacity(
    entry: dict[str, Any], message: str
) -> None:
    """A capacity the API server would refuse raises ValueError naming the capacity and fault."""
    with pytest.raises(ValueError, match=message):
        parse_capacities({"capacity": {"x": entry}})


def test_consumed_amounts_are_written_in_each_capacitys_own_format() -> None:
    """consumedCapacity strings follow the value's format: 5Gi for a binary card, 30 for cores."""
    capacities = parse_capacities(card())
    written = format_consumed(
        capacities, consumed_capacity(capacities, q(cores="30", memory="5000000000"))
    )
    assert written == {"cores": "30", "memory": "4769Mi"}
    assert format_consumed(capacities, {"cores": Fraction(0), "memory": Fraction(5 * GI)}) == {
        "cores": "0",
        "memory": "5Gi",
    }
    decimal = parse_capacities({"capacity": {"m": {"value": "16G"}}})
    assert format_consumed(decimal, {"m": Fraction(2 * 10**9), "other": Fraction(2048)}) == {
        "m": "2G",
        "other": "2048",
    }


def _go_round_up(request: int, minimum: int, step: int | None, maximum: int | None) -> int | None:
    """Transliterate roundUpRange and violateValidRange (int64 path) for whole numbers."""
    if request < minimum:
        value = minimum
    elif step is None:
        value = request
    else:
        added = request - minimum
        n = added // step
        if added % step != 0:
            n += 1
        value = minimum + step * n
    if maximum is not None and value > maximum:
        return None
    if step is not None and (value - minimum) % step != 0:
        return None
    return value


@given(
    request=st.integers(0, 10**6),
    minimum=st.integers(0, 1000),
    step=st.one_of(st.none(), st.integers(1, 1000)),
    spread=st.one_of(st.none(), st.integers(0, 5000)),
)
def test_whole_number_ranges_agree_with_the_scheduler_algorithm(
    request: int, minimum: int, step: int | None, spread: int | None
) -> None:
    """For whole numbers, range rounding and the max check equal the scheduler's int64 code."""
    maximum = None if spread is None else minimum + (spread if step is None else spread * step)
    limits = {"min": str(minimum)}
    if step is not None:
        limits["step"] = str(step)
    if maximum is not None:
        limits["max"] = str(maximum)
    capacities = one(str(10**7), {"default": str(minimum), "validRange": limits})
    expected = _go_round_up(request, minimum, step, maximum)
    try:
        got: int | None = int(consumed_capacity(capacities, {"x": Fraction(request)})["x"])
    except CapacityRejected:
        got = None
    assert got == expected
    if got is not None:
        assert got >= max(request, minimum)
        assert step is None or got - max(request, minimum) < step
