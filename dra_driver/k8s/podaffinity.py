"""Whether a node suits a pod's place among other pods, as kube-scheduler's filters judge it.

Two filters that look at the pods already bound, not at the node alone:

- ``InterPodAffinity``: the pod's required affinity terms need a matching pod in the node's
  topology domain (unless no pod matches anywhere and the pod matches its own term: the
  first of a group); its required anti-affinity terms forbid one there; and a bound pod's
  required anti-affinity term that matches this pod forbids that pod's domain.
- ``PodTopologySpread``, constraints with ``whenUnsatisfiable: DoNotSchedule``: the node's
  domain may hold at most ``maxSkew`` more matching pods, this one included, than the
  emptiest eligible domain (which counts as empty while fewer than ``minDomains`` exist).

``Placement.unfit`` answers per node; the rest is pure. Namespace selectors on affinity terms
other than the empty one (every namespace) are not evaluated: such a term is treated as
naming the pod's own namespace.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.scheduling import (
    label_selector_matches,
    node_affinity_matches,
    untolerated_taint,
)

AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"
SPREAD_REASON = "node(s) didn't match pod topology spread constraints"
SPREAD_LABEL_REASON = (
    "node(s) didn't match pod topology spread constraints (missing required label)"
)


@dataclasses.dataclass(frozen=True)
class _Bound:
    pod: Object
    node: Object


def required_terms(pod: Object, kind: str) -> list[Object]:
    """Return the pod's required ``podAffinity`` or ``podAntiAffinity`` terms."""
    affinity = (objects.spec(pod).get("affinity") or {}).get(kind) or {}
    return list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def spread_constraints(pod: Object) -> list[Object]:
    """Return the pod's topology spread constraints that forbid, not merely prefer."""
    return [
        c
        for c in objects.spec(pod).get("topologySpreadConstraints") or []
        if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
    ]


def relevant(pod: Object, anti_affinity_holders: Iterable[Object]) -> bool:
    """Whether anything here can refuse a node for ``pod`` (else skip building a placement)."""
    own = required_terms(pod, "podAffinity") or required_terms(pod, "podAntiAffinity")
    return bool(own or spread_constraints(pod)) or any(
        _term_matches(term, holder, pod)
        for holder in anti_affinity_holders
        for term in required_terms(holder, "podAntiAffinity")
    )


class Placement:
    """The bound pods and nodes one decision judges a pod against."""

    def __init__(self, pod: Object, pods: Iterable[Object], nodes: Iterable[Object]) -> None:
        self._pod = pod
        self._nodes = {str(n["metadata"]["name"]): n for n in nodes}
        self._bound = [
            _Bound(p, self._nodes[name])
            for p in pods
            if (name := str(objects.spec(p).get("nodeName") or "")) in self._nodes
            and not objects.is_terminal(p)
            and objects.uid(p) != objects.uid(pod)
        ]

    def unfit(self, node: Object) -> str | None:
        """Return why ``node`` breaks an affinity or spread rule for the pod, or ``None``."""
        labels = _labels(node)
        for bound in self._bound:
            for term in required_terms(bound.pod, "podAntiAffinity"):
                if _same_domain(term, bound.node, labels) and _term_matches(
                    term, bound.pod, self._pod
                ):
                    return EXISTING_ANTI_AFFINITY_REASON
        for term in required_terms(self._pod, "podAntiAffinity"):
            if any(self._in_domain(term, b, labels) for b in self._bound):
                return ANTI_AFFINITY_REASON
        for term in required_terms(self._pod, "podAffinity"):
            if not any(self._in_domain(term, b, labels) for b in self._bound) and not (
                self._first_of_group(term) and term.get("topologyKey", "") in labels
            ):
                return AFFINITY_REASON
        for constraint in spread_constraints(self._pod):
            reason = self._spread_unfit(constraint, labels)
            if reason is not None:
                return reason
        return None

    def _in_domain(self, term: Object, bound: _Bound, labels: Mapping[str, str]) -> bool:
        return _same_domain(term, bound.node, labels) and _term_matches(term, self._pod, bound.pod)

    def _first_of_group(self, term: Object) -> bool:
        """No bound pod matches the term, and the pod matches its own term."""
        return not any(_term_matches(term, self._pod, b.pod) for b in self._bound) and (
            _term_matches(term, self._pod, self._pod)
        )

    def _spread_unfit(self, constraint: Object, labels: Mapping[str, str]) -> str | None:
        key = str(constraint.get("topologyKey") or "")
        if key not in labels:
            return SPREAD_LABEL_REASON
        selector = _with_label_keys(constraint, self._pod)
        namespace = _namespace(self._pod)
        eligible = [n for n in self._nodes.values() if self._eligible(constraint, n, key)]
        counts: Counter[str] = Counter({_labels(n)[key]: 0 for n in eligible})
        eligible_names = {str(n["metadata"]["name"]) for n in eligible}
        for bound in self._bound:
            if (
                bound.node["metadata"]["name"] in eligible_names
                and _namespace(bound.pod) == namespace
                and label_selector_matches(selector, _labels(bound.pod))
            ):
                counts[_labels(bound.node)[key]] += 1
        least = min(counts.values(), default=0)
        if len(counts) < int(constraint.get("minDomains") or 1):
            least = 0
        mine = 1 if label_selector_matches(selector, _labels(self._pod)) else 0
        if counts.get(labels[key], 0) + mine - least > int(constraint.get("maxSkew") or 1):
            return SPREAD_REASON
        return None

    def _eligible(self, constraint: Object, node: Object, key: str) -> bool:
        """Whether a node's domain counts for the constraint (kube-scheduler's inclusion rules)."""
        if key not in _labels(node):
            return False
        if constraint.get("nodeAffinityPolicy", "Honor") == "Honor" and not node_affinity_matches(
            self._pod, node
        ):
            return False
        return not (
            constraint.get("nodeTaintsPolicy", "Ignore") == "Honor"
            and untolerated_taint(self._pod, node) is not None
        )


def _term_matches(term: Object, owner: Object, candidate: Object) -> bool:
    """Whether ``candidate`` is selected by ``owner``'s term (its selector and namespaces)."""
    namespaces: Sequence[str] = term.get("namespaces") or []
    every_namespace = term.get("namespaceSelector") == {}
    if not every_namespace and _namespace(candidate) not in (namespaces or [_namespace(owner)]):
        return False
    return label_selector_matches(_with_label_keys(term, owner), _labels(candidate))


def _with_label_keys(term: Object, owner: Object) -> Object | None:
    """Return the term's selector with ``matchLabelKeys``/``mismatchLabelKeys`` from ``owner``."""
    selector = term.get("labelSelector")
    if selector is None:
        return None
    own = _labels(owner)
    expressions = list(selector.get("matchExpressions") or [])
    for key in term.get("matchLabelKeys") or []:
        if key in own:
            expressions.append({"key": key, "operator": "In", "values": [own[key]]})
    for key in term.get("mismatchLabelKeys") or []:
        if key in own:
            expressions.append({"key": key, "operator": "NotIn", "values": [own[key]]})
    return {**selector, "matchExpressions": expressions}


def _same_domain(term: Object, node: Object, labels: Mapping[str, str]) -> bool:
    key = str(term.get("topologyKey") or "")
    value = _labels(node).get(key)
    return value is not None and labels.get(key) == value


def _labels(obj: Object) -> dict[str, str]:
    return dict(objects.metadata(obj).get("labels") or {})


def _namespace(pod: Object) -> str:
    return str(objects.metadata(pod).get("namespace") or "default")
