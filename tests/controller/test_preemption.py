"""Preemption through the controller: the real Allocator and Preemptor over the harness's Server.

node "n" has one T4 (100 cores, 16Gi). Two offline 40-core/6Gi pods run there; an online pod
asking 60 cores and 8Gi (two claims of 30/4Gi) fits only once one of them is gone. The Server
is the Preemptor's EvictionWriter, so every nomination, eviction and release is a write a test
can hold back from the informers or replay into a new process.
"""

from __future__ import annotations

from typing import Any

import pytest
from controller.interleave import Harness, build, claim_obj, pod_obj, settle
from controller.kit import NAMES, node

from dra_driver.controller.preemption import RELEASE_MARGIN_SECONDS
from dra_driver.engine.preempt import DEFAULT_GRACE_SECONDS
from dra_driver.k8s.errors import RetryableError
from dra_driver.k8s.reconcile import Requeue

Object = dict[str, Any]
ANNOTATION = NAMES.nomination_annotation
EXPIRY = DEFAULT_GRACE_SECONDS + RELEASE_MARGIN_SECONDS


def offline(name: str, cores: str, memory: str) -> Object:
    """Return an offline claim (the offline class sets ``priority: offline``)."""
    return claim_obj(name, cores, memory, device_class=NAMES.offline_device_class)


def pod(name: str, *claims: str, created: str = "2026-11-01T00:00:00Z", **labels: str) -> Object:
    """Return a gated pod using ``claims``, created at ``created``, with ``labels``."""
    made = pod_obj(name, *claims)
    made["metadata"].update(creationTimestamp=created, labels=labels)
    return made


def stored(h: Harness, kind: str, name: str) -> Object:
    """Return the Server's copy of an object of the default namespace."""
    return h.server.objs[(kind, "default", name)]


def bind(h: Harness, name: str) -> None:
    """Play the kubelet: bind the ungated pod where its claims are, and run it."""
    current = dict(stored(h, "pods", name))
    claims = [entry["resourceClaimName"] for entry in current["spec"]["resourceClaims"]]
    where = {h.server.nodes_of_claims()[claim] for claim in claims}
    assert len(where) == 1, name
    assert not current["spec"].get("schedulingGates"), name
    current["spec"] = {**current["spec"], "nodeName": where.pop()}
    current["status"] = {"phase": "Running"}
    h.server.put("pods", current)


def run(h: Harness, name: str, *claims: Object, created: str, **labels: str) -> None:
    """Create a pod and its claims, allocate them through the controller, and bind it."""
    for claim in claims:
        h.server.put("claims", claim)
    h.server.put(
        "pods", pod(name, *(c["metadata"]["name"] for c in claims), created=created, **labels)
    )
    settle(h.allocator, h.server, name)
    bind(h, name)


def finish(h: Harness, name: str) -> None:
    """End the pod (an evicted one after its grace period); the Releaser frees its claims."""
    claims = [e["resourceClaimName"] for e in stored(h, "pods", name)["spec"]["resourceClaims"]]
    h.server.delete("pods", "default", name)
    for claim in claims:
        h.releaser.reconcile(("default", claim))
        h.server.deliver()


def attempt(h: Harness, name: str) -> None:
    """One pass of the pod that leaves it waiting; every write reaches the informers after."""
    with pytest.raises(Requeue):
        h.allocator.reconcile(("default", name))
    h.server.deliver()


def two_batch_pods(**labels: str) -> Harness:
    """One card, preemption on, two offline 40/6Gi pods running; ``young`` is the younger."""
    h = build(node("n", 1), preemption=True)
    run(h, "old", offline("old-gpu", "40", "6Gi"), created="2026-11-01T00:00:00Z", **labels)
    run(h, "young", offline("young-gpu", "40", "6Gi"), created="2026-11-02T00:00:00Z", **labels)
    return h


def serving(h: Harness, claims: int = 2) -> list[str]:
    """Create the online pod: 60 cores and 8Gi in ``claims`` equal claims; return their names."""
    cores, memory = {1: ("60", "8Gi"), 2: ("30", "4Gi")}[claims]
    names = [f"serving-{i}" for i in range(claims)]
    for name in names:
        h.server.put("claims", claim_obj(name, cores, memory))
    h.server.put("pods", pod("serving", *names, created="2026-11-03T00:00:00Z"))
    return names


def nominated(h: Harness, claim: str) -> bool:
    """Whether the stored claim carries a nomination annotation."""
    return ANNOTATION in (stored(h, "claims", claim)["metadata"].get("annotations") or {})


def allocated(h: Harness, claim: str) -> bool:
    """Whether the stored claim is allocated."""
    return bool((stored(h, "claims", claim).get("status") or {}).get("allocation"))


def gated(h: Harness, name: str) -> bool:
    """Whether the stored pod still waits behind our gate."""
    return bool(stored(h, "pods", name)["spec"].get("schedulingGates"))


def reasons(h: Harness, name: str) -> list[str]:
    """Return the reasons of the events recorded on the named object, in order."""
    return [reason for who, reason, _ in h.events.items if who == name]


def test_one_eviction_holds_the_room_until_the_online_pod_takes_it() -> None:
    """One victim evicted, room nominated on both claims, a later pod kept out, then placed."""
    h = two_batch_pods()
    claims = serving(h)
    attempt(h, "serving")
    assert [ref.name for ref in h.server.evictions] == ["young"]
    assert stored(h, "pods", "young")["metadata"].get("deletionTimestamp")
    assert not stored(h, "pods", "old")["metadata"].get("deletionTimestamp")
    assert all(nominated(h, claim) for claim in claims)
    assert "Preempting" in reasons(h, "serving")
    assert "Preempted" in reasons(h, "young")
    assert h.sample("gpushare_controller_preemptions_total", result="nominated") == 1
    assert h.sample("gpushare_controller_preemption_victims_total") == 1

    # 20/2Gi fits beside "old" once "young" is gone, but only in the room held for "serving".
    h.server.put("claims", offline("filler-gpu", "20", "2Gi"))
    h.server.put("pods", pod("filler", "filler-gpu"))
    attempt(h, "filler")
    attempt(h, "serving")  # waits for the victim: no second eviction
    assert len(h.server.evictions) == 1
    finish(h, "young")
    assert not allocated(h, "young-gpu")
    attempt(h, "filler")
    assert not allocated(h, "filler-gpu")
    assert gated(h, "filler")

    settle(h.allocator, h.server, "serving")
    assert not gated(h, "serving")
    assert all(allocated(h, claim) and not nominated(h, claim) for claim in claims)
    attempt(h, "filler")  # the card is full: 40 + 60 cores
    assert not allocated(h, "filler-gpu")


def test_a_new_process_after_the_evictions_places_the_online_pod_in_the_held_room() -> None:
    """A crash after nominating and evicting: a new process keeps the room for the pod."""
    h = two_batch_pods()
    claims = serving(h)
    attempt(h, "serving")
    h = h.restart()
    h.server.put("claims", offline("filler-gpu", "20", "2Gi"))
    h.server.put("pods", pod("filler", "filler-gpu"))
    attempt(h, "filler")
    attempt(h, "serving")
    finish(h, "young")
    attempt(h, "filler")
    assert not allocated(h, "filler-gpu")
    settle(h.allocator, h.server, "serving")
    assert not gated(h, "serving")
    assert all(allocated(h, claim) and not nominated(h, claim) for claim in claims)
    assert [ref.name for ref in h.server.evictions] == ["young"]
    assert not allocated(h, "filler-gpu")


def test_a_new_process_evicts_what_a_crash_before_the_eviction_left_running() -> None:
    """A crash between nominating and evicting: the next process evicts the nominated victim."""
    h = two_batch_pods()
    serving(h)

    def crash(_: object) -> None:
        raise RetryableError("the controller died mid-request")

    h.server.evict = crash  # type: ignore[method-assign]
    with pytest.raises(RetryableError):
        h.allocator.reconcile(("default", "serving"))
    h.server.deliver()
    del h.server.evict
    assert h.server.evictions == []
    h = h.restart()
    attempt(h, "serving")
    assert [ref.name for ref in h.server.evictions] == ["young"]
    finish(h, "young")
    settle(h.allocator, h.server, "serving")
    assert not gated(h, "serving")
    assert not stored(h, "pods", "old")["metadata"].get("deletionTimestamp")


def test_an_error_between_two_nomination_writes_still_holds_all_the_room() -> None:
    """An error after the first claim's nomination: the pod still gets the whole room."""
    h = two_batch_pods()
    claims = serving(h)
    nominate, calls = h.server.nominate, []

    def fails_second(claim: Object, value: str | None) -> Object:
        calls.append(claim["metadata"]["name"])
        if len(calls) == 2:
            raise RetryableError("the API server timed out")
        return nominate(claim, value)

    h.server.nominate = fails_second  # type: ignore[method-assign]
    with pytest.raises(RetryableError):
        h.allocator.reconcile(("default", "serving"))
    del h.server.nominate
    h.server.deliver()
    assert [nominated(h, claim) for claim in claims] == [True, False]
    attempt(h, "serving")
    assert [ref.name for ref in h.server.evictions] == ["young"]
    h.server.put("claims", offline("filler-gpu", "20", "2Gi"))
    h.server.put("pods", pod("filler", "filler-gpu"))
    finish(h, "young")
    attempt(h, "filler")
    assert not allocated(h, "filler-gpu")
    settle(h.allocator, h.server, "serving")
    assert not gated(h, "serving")


def test_an_expired_nomination_is_dropped() -> None:
    """Past ``expires`` the held room is let go: annotation removed, preemptions{expired}."""
    h = two_batch_pods()
    (claim,) = serving(h, claims=1)
    attempt(h, "serving")
    assert nominated(h, claim)
    h.server.put("claims", offline("filler-gpu", "20", "2Gi"))
    h.server.put("pods", pod("filler", "filler-gpu"))
    attempt(h, "filler")
    assert nominated(h, claim)  # not expired yet
    h.clock.advance(EXPIRY + 1)
    attempt(h, "filler")  # any pass sweeps
    assert not nominated(h, claim)
    assert h.sample("gpushare_controller_preemptions_total", result="expired") == 1


def test_a_nomination_expiring_in_the_pass_that_places_its_pod_lets_the_pass_place_it() -> None:
    """The pass that drops the pod's own expired nomination places it on fresh claims."""
    h = two_batch_pods()
    (claim,) = serving(h, claims=1)
    attempt(h, "serving")
    finish(h, "young")
    h.clock.advance(EXPIRY + 1)
    settle(h.allocator, h.server, "serving")
    assert not gated(h, "serving")
    assert allocated(h, claim)
    assert not nominated(h, claim)
    assert h.sample("gpushare_controller_preemptions_total", result="expired") == 1


def test_a_nomination_whose_pod_is_gone_is_dropped() -> None:
    """The online pod deleted: its nomination goes at the next pass, preemptions{pod_gone}."""
    h = two_batch_pods()
    claims = serving(h)
    attempt(h, "serving")
    h.server.delete("pods", "default", "serving")
    h.server.put("claims", offline("filler-gpu", "20", "2Gi"))
    h.server.put("pods", pod("filler", "filler-gpu"))
    attempt(h, "filler")
    assert not any(nominated(h, claim) for claim in claims)
    assert h.sample("gpushare_controller_preemptions_total", result="pod_gone") == 2


def test_a_budget_at_zero_blocks_every_eviction_and_is_named() -> None:
    """A PodDisruptionBudget at 0 over both offline pods: nobody evicted, the event names it."""
    h = two_batch_pods(app="batch")
    h.server.put(
        "budgets",
        {
            "metadata": {"name": "batch", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "batch"}}},
            "status": {"disruptionsAllowed": 0},
        },
    )
    claims = serving(h)
    attempt(h, "serving")
    assert h.server.evictions == []
    assert not any(nominated(h, claim) for claim in claims)
    (message,) = [m for who, r, m in h.events.items if (who, r) == ("serving", "PreemptionBlocked")]
    assert "PodDisruptionBudget default/batch" in message
    assert h.sample("gpushare_controller_preemptions_total", result="blocked") == 1


def test_a_budget_spent_after_the_view_saw_it_refuses_the_eviction() -> None:
    """The budget watch lags: the Eviction API refuses, nobody goes, and the pod says why."""
    h = two_batch_pods(app="batch")
    serving(h)
    budget = {
        "metadata": {"name": "batch", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "batch"}}},
        "status": {"disruptionsAllowed": 1},
    }
    spent = h.server.put("budgets", budget)
    spent["status"]["disruptionsAllowed"] = 0
    h.server.put("budgets", spent, deliver=False)  # the view still sees 1
    with pytest.raises(Requeue):
        h.allocator.reconcile(("default", "serving"))
    assert h.server.evictions == []
    waiting = [m for who, r, m in h.events.items if (who, r) == ("serving", "WaitingForPreemption")]
    assert waiting
    assert "eviction refused" in waiting[-1]
    assert "disruption budget batch" in waiting[-1]


def test_without_preemption_nothing_is_evicted() -> None:
    """Preemption off (no Preemptor): the online pod waits, nobody is evicted or nominated."""
    h = build(node("n", 1))
    run(h, "old", offline("old-gpu", "40", "6Gi"), created="2026-11-01T00:00:00Z")
    run(h, "young", offline("young-gpu", "40", "6Gi"), created="2026-11-02T00:00:00Z")
    claims = serving(h)
    attempt(h, "serving")
    assert h.server.evictions == []
    assert not any(
        stored(h, "pods", p)["metadata"].get("deletionTimestamp") for p in ("old", "young")
    )
    assert not any(nominated(h, claim) for claim in claims)
    assert reasons(h, "serving") == ["FailedAllocation"]
