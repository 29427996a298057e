"""The monitor's rules: online work suspends offline work on its cards; a lone task bursts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dra_driver.hamicore.feedback import (
    ENFORCED,
    SUSPENDED,
    Decision,
    RegionState,
    decide,
    released,
)

ONLINE, OFFLINE = 0, 1
A, B = "GPU-a", "GPU-b"


def region(
    key: str,
    cards: tuple[str, ...] = (A,),
    *,
    priority: int = ONLINE,
    kernel: int = 0,
    switch: int = ENFORCED,
    busy: frozenset[str] = frozenset(),
) -> RegionState:
    return RegionState(key, cards, priority, kernel, switch, busy)


def by_key(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.key: d for d in decisions}


def test_busy_online_work_suspends_offline_work_on_its_card() -> None:
    """Online launched lately: the offline region on that card is held, its limit enforced."""
    out = by_key(decide([region("on", kernel=2), region("off", priority=OFFLINE, kernel=2)]))
    assert out["off"].recent_kernel == SUSPENDED
    assert out["off"].suspended_by == ONLINE
    assert out["off"].utilization_switch == ENFORCED
    assert out["on"].recent_kernel == 1  # decremented, still active
    assert not out["on"].suspended


def test_offline_work_resumes_once_online_work_has_been_idle_for_two_periods() -> None:
    """recent_kernel 2 decays to 1 (still busy), then 0: the offline region is resumed."""
    states = [region("on", kernel=2), region("off", priority=OFFLINE, kernel=SUSPENDED)]
    first = by_key(decide(states))
    assert first["off"].suspended
    second = by_key(decide([region("on", kernel=first["on"].recent_kernel), states[1]]))
    assert second["on"].recent_kernel == 0
    assert second["off"].recent_kernel == 0
    assert second["off"].suspended_by is None


def test_a_lone_busy_task_may_burst_and_two_busy_peers_may_not() -> None:
    """One busy task of a priority on a card: switch 0; two of the same priority: both 1."""
    alone = by_key(decide([region("a", kernel=2)]))
    assert alone["a"].utilization_switch == 0
    pair = by_key(decide([region("a", kernel=2), region("b", kernel=2)]))
    assert {d.utilization_switch for d in pair.values()} == {ENFORCED}


def test_an_idle_peer_does_not_stop_a_busy_task_from_bursting() -> None:
    """A task of the same priority that launched nothing lately does not count."""
    out = by_key(decide([region("a", kernel=2), region("b", kernel=1)]))
    assert out["a"].utilization_switch == 0
    assert out["b"].recent_kernel == 0


def test_work_on_another_card_changes_nothing() -> None:
    """Online work on card B neither suspends nor limits offline work on card A."""
    out = by_key(
        decide([region("on", cards=(B,), kernel=2), region("off", priority=OFFLINE, kernel=2)])
    )
    assert not out["off"].suspended
    assert out["off"].utilization_switch == 0


def test_a_claim_spanning_cards_is_suspended_by_work_on_any_of_them() -> None:
    """Offline on A and B, online busy on B only: suspended (HAMi looks at one card only)."""
    out = by_key(
        decide(
            [
                region("on", cards=(B,), kernel=2),
                region("off", cards=(A, B), priority=OFFLINE, kernel=2),
            ]
        )
    )
    assert out["off"].suspended


def test_sm_utilisation_counts_as_busy_without_a_launch_mark() -> None:
    """A task the library does not rate-limit is still busy when its processes use SMs."""
    out = by_key(
        decide([region("on", busy=frozenset({A})), region("off", priority=OFFLINE, kernel=2)])
    )
    assert out["on"].active
    assert out["off"].suspended
    # Utilisation reported on a card the region does not hold does not count.
    elsewhere = by_key(
        decide([region("on", busy=frozenset({B})), region("off", priority=OFFLINE, kernel=2)])
    )
    assert not elsewhere["off"].suspended


def test_released_regions_run_with_their_limits_enforced() -> None:
    """Stopping resumes a held task and enforces the SM limit; other values stay."""
    assert released(region("x", kernel=SUSPENDED, switch=0)) == (0, ENFORCED)
    assert released(region("x", kernel=2, switch=0)) == (2, ENFORCED)


regions = st.lists(
    st.builds(
        RegionState,
        key=st.uuids().map(str),
        uuids=st.lists(st.sampled_from([A, B, "GPU-c"]), min_size=1, max_size=3).map(tuple),
        priority=st.sampled_from([ONLINE, OFFLINE]),
        recent_kernel=st.sampled_from([SUSPENDED, 0, 1, 2]),
        utilization_switch=st.sampled_from([0, ENFORCED]),
        busy=st.frozensets(st.sampled_from([A, B, "GPU-c"])),
    ),
    max_size=8,
    unique_by=lambda state: state.key,
)


@given(regions)
def test_only_work_of_higher_priority_on_a_shared_card_suspends(
    states: list[RegionState],
) -> None:
    """Suspended iff a strictly more important busy task shares a card; order does not matter."""
    decisions = by_key(decide(states))
    busy = {d.key for d in decisions.values() if d.active}
    for state in states:
        wanted = any(
            other.key in busy
            and other.priority < state.priority
            and set(other.uuids) & set(state.uuids)
            and (other.recent_kernel > 1 or set(other.uuids) & other.busy & set(state.uuids))
            for other in states
        )
        assert decisions[state.key].suspended == wanted
        if state.priority == ONLINE:
            assert not decisions[state.key].suspended
    assert by_key(decide(list(reversed(states)))) == decisions
