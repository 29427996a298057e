"""Inter-pod affinity and topology spread, judged per node as kube-scheduler's filters do."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.k8s.podaffinity import (
    AFFINITY_REASON,
    ANTI_AFFINITY_REASON,
    EXISTING_ANTI_AFFINITY_REASON,
    SPREAD_LABEL_REASON,
    SPREAD_REASON,
    Placement,
    relevant,
)

Object = dict[str, Any]
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
NODES = {
    "a": {"metadata": {"name": "a", "labels": {HOST: "a", ZONE: "z1"}}},
    "b": {"metadata": {"name": "b", "labels": {HOST: "b", ZONE: "z1"}}},
    "c": {"metadata": {"name": "c", "labels": {HOST: "c", ZONE: "z2"}}},
    "bare": {"metadata": {"name": "bare", "labels": {HOST: "bare"}}},
}


def pod(name: str, node: str = "", namespace: str = "default", **labels: str) -> Object:
    """Return a pod with labels, bound to ``node`` when given."""
    spec: Object = {"nodeName": node} if node else {}
    return {
        "metadata": {"name": name, "uid": name, "namespace": namespace, "labels": labels},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def term(key: str, **labels: str) -> Object:
    """Return a required pod (anti-)affinity term selecting ``labels`` over ``key``."""
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key}


def with_affinity(p: Object, kind: str, *terms: Object) -> Object:
    """Give a pod required terms of ``podAffinity`` or ``podAntiAffinity``."""
    p["spec"]["affinity"] = {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}
    return p


def verdicts(incoming: Object, bound: list[Object], nodes: tuple[str, ...] = ("a", "b", "c")):
    """Return node -> reason (or None) for the incoming pod."""
    placement = Placement(incoming, bound, [NODES[n] for n in nodes])
    return {n: placement.unfit(NODES[n]) for n in nodes}


def test_anti_affinity_keeps_the_pod_out_of_the_domain_of_a_matching_pod():
    """Per host the matching pod's node is refused; per zone its whole zone is."""
    web = [pod("web-0", "a", app="web")]
    per_host = with_affinity(pod("web-1", app="web"), "podAntiAffinity", term(HOST, app="web"))
    assert verdicts(per_host, web) == {"a": ANTI_AFFINITY_REASON, "b": None, "c": None}
    per_zone = with_affinity(pod("web-1", app="web"), "podAntiAffinity", term(ZONE, app="web"))
    assert verdicts(per_zone, web) == {
        "a": ANTI_AFFINITY_REASON,
        "b": ANTI_AFFINITY_REASON,
        "c": None,
    }


def test_a_bound_pods_anti_affinity_keeps_matching_pods_away_from_it():
    """The rule is symmetric: a bound pod's anti-affinity refuses its domain to pods it selects."""
    lonely = with_affinity(pod("lonely", "a"), "podAntiAffinity", term(HOST, app="db"))
    assert verdicts(pod("db", app="db"), [lonely]) == {
        "a": EXISTING_ANTI_AFFINITY_REASON,
        "b": None,
        "c": None,
    }
    assert verdicts(pod("other", app="web"), [lonely]) == {"a": None, "b": None, "c": None}


def test_affinity_needs_a_matching_pod_in_the_domain_unless_it_is_the_first_of_its_group():
    """A matching pod in the zone is required; with none anywhere, a self-matching pod may start."""
    near_cache = with_affinity(pod("app"), "podAffinity", term(ZONE, app="cache"))
    cache = [pod("cache", "a", app="cache")]
    assert verdicts(near_cache, cache) == {"a": None, "b": None, "c": AFFINITY_REASON}
    assert set(verdicts(near_cache, []).values()) == {AFFINITY_REASON}
    first = with_affinity(pod("cache-0", app="cache"), "podAffinity", term(ZONE, app="cache"))
    assert verdicts(first, [], ("a", "c", "bare")) == {
        "a": None,
        "c": None,
        "bare": AFFINITY_REASON,
    }


def test_terms_look_in_the_pods_namespace_unless_told_otherwise():
    """A pod of another namespace does not match, unless the term names it or selects all."""
    elsewhere = [pod("web-0", "a", namespace="other", app="web")]
    plain = with_affinity(pod("web-1", app="web"), "podAntiAffinity", term(HOST, app="web"))
    assert verdicts(plain, elsewhere)["a"] is None
    named = term(HOST, app="web") | {"namespaces": ["other"]}
    assert verdicts(with_affinity(pod("w", app="web"), "podAntiAffinity", named), elsewhere)["a"]
    every = term(HOST, app="web") | {"namespaceSelector": {}}
    assert verdicts(with_affinity(pod("w", app="web"), "podAntiAffinity", every), elsewhere)["a"]


def spread(p: Object, **constraint: Any) -> Object:
    """Give a pod one DoNotSchedule spread constraint over zones selecting app=web."""
    base = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}}  # fmt: skip
    p["spec"]["topologySpreadConstraints"] = [base | constraint]
    return p


def test_spread_refuses_the_domain_that_would_be_too_far_ahead():
    """Two matching pods in z1 and none in z2: with maxSkew 1 only z2 takes the third."""
    bound = [pod("w0", "a", app="web"), pod("w1", "b", app="web")]
    assert verdicts(spread(pod("w2", app="web")), bound) == {
        "a": SPREAD_REASON,
        "b": SPREAD_REASON,
        "c": None,
    }
    assert verdicts(spread(pod("w2", app="web"), maxSkew=3), bound)["a"] is None


def test_spread_needs_the_label_and_counts_only_eligible_domains():
    """A node without the key is refused; minDomains above the domains found makes the least 0."""
    bound = [pod("w0", "a", app="web"), pod("w1", "c", app="web")]
    assert verdicts(spread(pod("w2", app="web")), bound, ("a", "bare"))["bare"] == (
        SPREAD_LABEL_REASON
    )
    assert verdicts(spread(pod("w2", app="web")), bound)["a"] is None
    assert verdicts(spread(pod("w2", app="web"), minDomains=3), bound)["a"] == SPREAD_REASON


def test_spread_honours_the_pods_node_selector_and_match_label_keys():
    """Domains the pod may not use do not count; matchLabelKeys narrows to the same revision."""
    bound = [pod("w0", "a", app="web"), pod("w1", "b", app="web")]
    pinned = spread(pod("w2", app="web"))
    pinned["spec"]["nodeSelector"] = {ZONE: "z1"}
    assert verdicts(pinned, bound, ("a", "b"))["a"] is None
    old_revision = [pod("w0", "a", app="web", rev="1"), pod("w1", "b", app="web", rev="1")]
    fresh = spread(pod("w2", app="web", rev="2"), matchLabelKeys=["rev"])
    assert verdicts(fresh, old_revision)["a"] is None


@pytest.mark.parametrize("when", ["ScheduleAnyway"])
def test_soft_spread_and_finished_pods_never_refuse(when: str):
    """ScheduleAnyway only scores; a finished pod is not counted."""
    bound = [pod("w0", "a", app="web"), pod("w1", "b", app="web")]
    assert verdicts(spread(pod("w2", app="web"), whenUnsatisfiable=when), bound)["a"] is None
    done = [pod("w0", "a", app="web")]
    done[0]["status"]["phase"] = "Succeeded"
    anti = with_affinity(pod("w1", app="web"), "podAntiAffinity", term(HOST, app="web"))
    assert verdicts(anti, done)["a"] is None


def test_only_pods_these_rules_concern_are_judged():
    """A plain pod with no bound anti-affinity selecting it needs no placement at all."""
    holder = with_affinity(pod("h", "a"), "podAntiAffinity", term(HOST, app="db"))
    assert relevant(pod("plain", app="web"), [holder]) is False
    assert relevant(pod("db", app="db"), [holder]) is True
    assert relevant(spread(pod("w", app="web")), []) is True
