"""A search's tentative picks: popping a pick gives back exactly what pushing it took."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

from controller.kit import cluster, node

from dra_driver.api import Priority
from dra_driver.engine.matching import Pick
from dra_driver.engine.tentative import Tentative


def _pick(device, consumed, *, admin=False, priority=Priority.ONLINE) -> Pick:
    alternative = SimpleNamespace(admin=admin, config=SimpleNamespace(priority=priority))
    return Pick(0, alternative, device, consumed)


def test_pop_undoes_push_for_shares_whole_cards_and_admin_access() -> None:
    """Each pop returns free capacity, use and online hosting to what they were before."""
    snapshot = cluster(node("node-1", 2))
    shared, whole = snapshot.devices["node-1"]
    tentative = Tentative(snapshot)

    def view() -> list[object]:
        return [
            (
                tentative.free(d),
                tentative.fraction(d),
                tentative.in_use(d),
                tentative.hosts_online(d),
            )
            for d in (shared, whole)
        ]

    before = view()
    picks = [
        _pick(shared, {"cores": Fraction(30), "memory": Fraction(2**30)}),
        _pick(shared, {"cores": Fraction(20)}, priority=Priority.OFFLINE),
        _pick(whole, None),
        _pick(whole, None, admin=True),
    ]
    states = []
    for pick in picks:
        states.append(view())
        tentative.push(pick)
    assert tentative.free(shared) == {"cores": 50, "memory": 15 * 2**30}
    assert (tentative.free(whole), tentative.in_use(whole)) == (None, True)
    assert tentative.hosts_online(shared)
    assert not tentative.hosts_online(whole)
    for state in reversed(states):
        tentative.pop()
        assert view() == state
    assert view() == before
    assert tentative.picks == []
