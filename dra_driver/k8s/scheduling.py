"""Whether a pod may run on a node, by the rules kube-scheduler applies before devices.

Pure functions on raw objects: the pod's ``nodeSelector``, its required node affinity, the
node's taints against the pod's tolerations, and ``spec.unschedulable``. Each returns ``None``
when the node fits, else a short reason suitable for "0/N nodes are available: ..." messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object

_BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
_UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"


def _compare(have: str, want: list[str], greater: bool) -> bool:
    if len(want) != 1:
        return False
    try:
        left, right = int(have), int(want[0])
    except ValueError:
        return False
    return left > right if greater else left < right


def _expression_matches(expression: Object, values_of: dict[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = expression.get("values") or []
    value = values_of.get(key)
    checks = {
        "In": lambda: value is not None and value in values,
        "NotIn": lambda: value is None or value not in values,
        "Exists": lambda: value is not None,
        "DoesNotExist": lambda: value is None,
        "Gt": lambda: value is not None and _compare(value, values, greater=True),
        "Lt": lambda: value is not None and _compare(value, values, greater=False),
    }
    check = checks.get(operator)
    return check is not None and check()


def label_selector_matches(selector: Object | None, labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector selects ``labels``: ``None`` selects nothing, ``{}`` everything."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(e, dict(labels)) for e in selector.get("matchExpressions") or [])


def node_selector_term_matches(term: Object, node: Object) -> bool:
    """Whether a NodeSelectorTerm (matchExpressions on labels, matchFields on the name) fits."""
    metadata = objects.metadata(node)
    labels = metadata.get("labels") or {}
    fields = {"metadata.name": metadata.get("name", "")}
    return all(_expression_matches(e, labels) for e in term.get("matchExpressions") or []) and all(
        _expression_matches(e, fields) for e in term.get("matchFields") or []
    )


def node_selector_matches(selector: Object | None, node: Object) -> bool:
    """Whether a NodeSelector (terms ORed) fits; ``None`` matches every node."""
    if selector is None:
        return True
    return any(node_selector_term_matches(t, node) for t in selector.get("nodeSelectorTerms") or [])


def tolerates(toleration: Object, taint: Object) -> bool:
    """Whether one toleration (of a pod, or of a device request) tolerates ``taint``."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )


def node_unfit_reason(pod: Object, node: Object) -> str | None:
    """Return why ``pod`` cannot run on ``node``, or ``None`` if it can."""
    tolerations = objects.spec(pod).get("tolerations") or []
    if objects.spec(node).get("unschedulable") and not any(
        tolerates(t, {"key": _UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}) for t in tolerations
    ):
        return "node is unschedulable"
    if not node_affinity_matches(pod, node):
        return "node didn't match Pod's node affinity/selector"
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return f"node had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    return None


def node_affinity_matches(pod: Object, node: Object) -> bool:
    """Whether the node fits the pod's ``nodeSelector`` and required node affinity."""
    spec = objects.spec(pod)
    labels = objects.metadata(node).get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return node_selector_matches(required, node)


def untolerated_taint(pod: Object, node: Object) -> Object | None:
    """Return the first ``NoSchedule``/``NoExecute`` taint of the node the pod does not tolerate."""
    tolerations = objects.spec(pod).get("tolerations") or []
    for taint in objects.spec(node).get("taints") or []:
        if taint.get("effect") in _BLOCKING_EFFECTS and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return dict(taint)
    return None


def pinned_node(claims: Iterable[Object]) -> str | None:
    """Return the node an allocated claim's ``nodeSelector`` names by ``metadata.name``.

    That is how an allocation of node-local devices pins its pod (the engine writes one term
    with one such field); ``None`` when no claim is pinned that way.
    """
    for claim in claims:
        selector = (objects.status(claim).get("allocation") or {}).get("nodeSelector")
        for term in (selector or {}).get("nodeSelectorTerms") or []:
            for field in term.get("matchFields") or []:
                values = field.get("values") or []
                if field.get("key") == "metadata.name" and field.get("operator") == "In" and values:
                    return str(values[0])
    return None
