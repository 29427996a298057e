"""Interned free capacities and remembered comparisons answer exactly as computed afresh."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.engine import amounts
from dra_driver.engine.amounts import Comparisons, FreeStates

_amount = st.fractions(min_value=-10, max_value=100, max_denominator=4)
_free = st.dictionaries(st.sampled_from(["cores", "memory"]), _amount, min_size=2)
_share = st.dictionaries(
    st.sampled_from(["cores", "memory"]), st.fractions(0, 100, max_denominator=4), min_size=1
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_free, _share), min_size=1, max_size=30))
def test_remembered_answers_match_fresh_ones_for_any_sequence(
    pairs: list[tuple[dict[str, Fraction], dict[str, Fraction]]],
) -> None:
    """Over any sequence of states and shares, fits and closeness equal a fresh computation."""
    states, comparisons = FreeStates(), Comparisons()
    shares: dict[tuple[tuple[str, Fraction], ...], dict[str, Fraction]] = {}
    for free, share in pairs:
        interned = states.intern(dict(free))
        # The engine's shares are long-lived too: one object per distinct amount.
        consumed = shares.setdefault(tuple(sorted(share.items())), share)
        expected = all(free[name] >= amount for name, amount in consumed.items() if name in free)
        if set(consumed) <= set(free):
            assert comparisons.fits(interned, consumed) is expected
        assert comparisons.closeness(consumed, interned) == amounts.closeness(consumed, free)


def test_equal_free_capacities_are_one_object_and_different_ones_are_not() -> None:
    """intern() returns the first dict of equal contents, never one of other contents."""
    states = FreeStates()
    first = states.intern({"cores": Fraction(25), "memory": Fraction(10)})
    again = states.intern({"memory": Fraction(10), "cores": Fraction(25)})
    other = states.intern({"cores": Fraction(25), "memory": Fraction(11)})
    assert again is first
    assert other is not first
    assert other == {"cores": 25, "memory": 11}


def test_a_forgotten_comparison_is_computed_again_correctly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the bound the table starts over, and answers stay right for new objects."""
    monkeypatch.setattr(amounts, "_REMEMBERED", 2)
    comparisons = Comparisons()
    share = {"cores": Fraction(30)}
    answers = [
        comparisons.fits({"cores": Fraction(value)}, share) for value in (10, 40, 29, 30, 31)
    ]
    assert answers == [False, True, False, True, True]
