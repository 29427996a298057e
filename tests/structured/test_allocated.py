"""The allocated state counts claims as the scheduler's GatherAllocatedState does."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.structured.allocated import AllocatedState, DeviceId
from dra_driver.structured.consumable import parse_capacities

DRIVER = "gpu.example.com"
GPU0: DeviceId = (DRIVER, "node-a", "gpu-0")
GPU1: DeviceId = (DRIVER, "node-a", "gpu-1")
MI = 1024**2
GI = 1024**3
CARD = parse_capacities(
    {
        "capacity": {
            "cores": {"value": "100"},
            "memory": {"value": "16Gi"},
        }
    }
)


def result(device: str = "gpu-0", share: str | None = "s1", **consumed: str) -> dict[str, Any]:
    built: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": device}
    if share is not None:
        built["shareID"] = share
        built["consumedCapacity"] = consumed
    return built


def claim(*results: dict[str, Any], name: str = "c") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "default", "name": name},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def test_shares_sum_per_device_and_unshared_results_are_exclusive() -> None:
    """Shares' consumedCapacity is summed per device; a result without shareID is exclusive."""
    state = AllocatedState.from_claims(
        [
            claim(result(share="a", cores="40", memory="5Gi")),
            claim(result(share="b", cores="30", memory="1Gi"), result("gpu-1", share=None)),
        ]
    )
    assert state.consumed == {GPU0: {"cores": 70, "memory": 6 * GI}}
    assert state.shares == {GPU0: 2}
    assert state.exclusive == {GPU1}
    assert state.problems == []
    assert state.in_use(GPU0)
    assert state.in_use(GPU1)
    assert not state.in_use((DRIVER, "node-a", "gpu-2"))


def test_admin_access_and_unallocated_claims_count_for_nothing() -> None:
    """adminAccess results and claims without status.allocation leave the state empty."""
    admin = {**result(share=None), "adminAccess": True}
    state = AllocatedState.from_claims(
        [claim(admin), {"metadata": {"name": "pending"}}, {"status": {"allocation": None}}]
    )
    assert state == AllocatedState()
    assert not state.in_use(GPU0)
    assert state.problems == []


def test_a_share_consuming_nothing_still_marks_the_device_used() -> None:
    """A share with zero (or no) consumedCapacity is counted, so the device is not unused."""
    state = AllocatedState.from_claims(
        [claim(result(share="z", cores="0")), claim(result("gpu-1"))]
    )
    assert state.shares == {GPU0: 1, GPU1: 1}
    assert state.consumed == {GPU0: {"cores": 0}, GPU1: {}}
    assert state.in_use(GPU0)
    assert state.in_use(GPU1)


def test_free_is_value_less_consumed_and_goes_negative_when_over_committed() -> None:
    """free() subtracts the shares from each value and does not clamp an over-commitment."""
    state = AllocatedState.from_claims([claim(result(cores="60", memory="10Gi"))])
    assert state.free(GPU0, CARD) == {"cores": 40, "memory": 6 * GI}
    state.add_result(result(share="s2", cores="50", memory="1Gi"))
    assert state.free(GPU0, CARD) == {"cores": -10, "memory": 5 * GI}
    assert state.free(GPU1, CARD) == {"cores": 100, "memory": 16 * GI}


def test_fits_allows_reaching_the_value_exactly_but_not_exceeding_it() -> None:
    """fits() accepts used + consumed == value, refuses one unit more, and refuses exclusive use."""
    state = AllocatedState.from_claims([claim(result(cores="60", memory="10Gi"))])
    assert state.fits(GPU0, CARD, {"cores": Fraction(40), "memory": Fraction(6 * GI)})
    assert not state.fits(GPU0, CARD, {"cores": Fraction(41), "memory": Fraction(0)})
    assert not state.fits(GPU0, CARD, {"cores": Fraction(0), "memory": Fraction(6 * GI + 1)})
    assert state.fits(GPU1, CARD, {"cores": Fraction(100)})
    state.add_result(result("gpu-1", share=None))
    assert not state.fits(GPU1, CARD, {})


def test_remove_result_is_the_exact_inverse_of_add_result() -> None:
    """Removing a share restores the previous state, with no leftover zero entries."""
    state = AllocatedState.from_claims([claim(result(share="a", cores="10"))])
    before = state.copy()
    extra = result(share="b", cores="5", memory="1Gi")
    state.add_result(extra)
    assert state.consumed[GPU0] == {"cores": 15, "memory": GI}
    state.remove_result(extra)
    assert state == before
    assert state.consumed == {GPU0: {"cores": 10}}
    assert state.shares == {GPU0: 1}
    state.remove_result(result(share="a", cores="10"))
    assert state == AllocatedState()
    assert (state.exclusive, state.consumed, state.shares) == (set(), {}, {})


@pytest.mark.parametrize(
    "bogus",
    [
        result(share="never", cores="10"),
        result(share="a", cores="11"),
        result(share=None),
        result("gpu-1", share="a", cores="10"),
    ],
    ids=["unknown share", "same share other amount", "not exclusive", "other device"],
)
def test_removing_what_was_never_added_raises_and_changes_nothing(bogus: dict[str, Any]) -> None:
    """remove_result of a result that was not added raises ValueError and leaves the state."""
    state = AllocatedState.from_claims([claim(result(share="a", cores="10"))])
    before = state.copy()
    with pytest.raises(ValueError, match=r"cannot remove .* it was not added"):
        state.remove_result(bogus)
    assert state == before


def test_remove_claim_is_all_or_nothing() -> None:
    """A claim whose second result was never added is not removed at all."""
    state = AllocatedState.from_claims([claim(result(share="a", cores="10"))])
    before = state.copy()
    with pytest.raises(ValueError, match="share b"):
        state.remove_claim(claim(result(share="a", cores="10"), result(share="b", cores="1")))
    assert state == before
    state.remove_claim(claim(result(share="a", cores="10")))
    assert state == AllocatedState()


def test_a_device_held_exclusively_twice_stays_used_until_both_are_removed() -> None:
    """An inconsistent double exclusive allocation is counted, so one removal keeps it in use."""
    state = AllocatedState.from_claims([claim(result(share=None)), claim(result(share=None))])
    state.remove_result(result(share=None))
    assert state.exclusive == {GPU0}
    state.remove_result(result(share=None))
    assert state.exclusive == set()
    with pytest.raises(ValueError, match="exclusive use"):
        state.remove_result(result(share=None))


MALFORMED = [
    ({"request": "gpu", "driver": DRIVER, "pool": "node-a"}, "lacks driver, pool or device"),
    ({**result(), "device": ""}, "lacks driver, pool or device"),
    (result(share="x", cores="lots"), "cores: quantity 'lots' must match"),
    ({**result(), "shareID": 7}, "has shareID 7"),
    ({**result(), "consumedCapacity": ["cores"]}, "has consumedCapacity"),
    ("gpu-0", "allocation result is not an object"),
]


@pytest.mark.parametrize(
    ("bad", "message"), MALFORMED, ids=["no device", "empty", "qty", "id", "capacity", "str"]
)
def test_a_malformed_result_is_skipped_and_reported_without_losing_the_rest(
    bad: Any, message: str
) -> None:
    """A rebuild skips a malformed result, names it in problems, and counts the claim's others."""
    state = AllocatedState.from_claims([claim(bad, result("gpu-1", share="ok", cores="5"))])
    assert state.consumed == {GPU1: {"cores": 5}}
    assert state.exclusive == set()
    assert len(state.problems) == 1
    assert state.problems[0].startswith("claim default/c: ")
    assert message in state.problems[0]
    state.remove_claim(claim(bad, result("gpu-1", share="ok", cores="5")))
    assert state == AllocatedState()


@pytest.mark.parametrize(
    "bad",
    [
        "not a claim",
        {"status": "allocated"},
        {"status": {"allocation": {"devices": {"results": "x"}}}},
    ],
    ids=["str", "status", "results"],
)
def test_a_malformed_claim_is_reported_and_the_rebuild_goes_on(bad: Any) -> None:
    """A claim of the wrong shape is recorded in problems; the other claims are still counted."""
    state = AllocatedState.from_claims([bad, claim(result(share=None))])
    assert state.exclusive == {GPU0}
    assert len(state.problems) == 1
    state.remove_claim(bad)
    assert state.exclusive == {GPU0}


def test_copy_is_independent() -> None:
    """Changing a copy leaves the original as it was."""
    state = AllocatedState.from_claims([claim(result(cores="10"))])
    copied = state.copy()
    copied.add_result(result(share="b", cores="5"))
    copied.add_result(result("gpu-1", share=None))
    assert state.consumed == {GPU0: {"cores": 10}}
    assert state.shares == {GPU0: 1}
    assert state.exclusive == set()
    assert copied != state


# Few devices, share IDs and amounts, so that duplicates and coinciding shares are common.
results_strategy = st.builds(
    result,
    device=st.sampled_from(["gpu-0", "gpu-1", "gpu-2"]),
    share=st.sampled_from([None, "s1", "s2", "s3"]),
    cores=st.sampled_from(["0", "1", "50"]),
    memory=st.sampled_from(["1Mi", "1Gi", "1536Mi"]),
) | st.builds(lambda r: {**r, "adminAccess": True}, st.builds(result))


@settings(max_examples=300)
@given(st.lists(st.tuples(st.booleans(), results_strategy, st.integers(0, 1000)), max_size=30))
def test_incremental_changes_equal_a_rebuild_and_removing_everything_empties(
    operations: list[tuple[bool, dict[str, Any], int]],
) -> None:
    """Any add/remove sequence equals the state rebuilt from the survivors; removing all empties."""
    state = AllocatedState()
    survivors: list[dict[str, Any]] = []
    for add, picked, index in operations:
        if add or not survivors:
            state.add_result(picked)
            survivors.append(picked)
        else:
            state.remove_result(survivors.pop(index % len(survivors)))
        assert state == AllocatedState.from_claims([claim(*survivors)])
    for removed in reversed(survivors):
        state.remove_result(removed)
    assert state == AllocatedState()
    assert (state.exclusive, state.consumed, state.shares, state.problems) == (set(), {}, {}, [])


@pytest.mark.parametrize(
    ("results", "problem"),
    [
        ([result(share="a", cores="60"), result(share="b", cores="40")], None),
        (
            [result(share="a", cores="60"), result(share="b", cores="41")],
            "cores: 101 allocated of 100",
        ),
        (
            [result(share="a", memory="10Gi"), result(share="b", memory="7Gi")],
            "memory: 17Gi allocated of 16Gi",
        ),
        (
            [result(share="a", cores="10"), result(share="a", cores="10")],
            "share a allocated more than once",
        ),
        (
            [result(share=None), result(share="a", cores="1")],
            "used whole beside 1 other allocation(s)",
        ),
        ([result(share=None), result(share=None)], "used whole beside 1 other allocation(s)"),
        ([result(share=None)], None),
    ],
)
def test_overcommitted_names_how_a_card_holds_more_than_it_can(
    results: list[dict[str, Any]], problem: str | None
) -> None:
    """Over capacity, a shareID twice or whole use beside others is reported; a full card is not."""
    state = AllocatedState.from_claims([claim(r, name=f"c{i}") for i, r in enumerate(results)])
    assert state.overcommitted(GPU0, CARD) == problem
    assert state.overcommitted(GPU1, CARD) is None
