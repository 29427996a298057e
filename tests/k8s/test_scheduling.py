"""Node fit rules: selector, required affinity, taints and tolerations, unschedulable."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.k8s.scheduling import node_selector_matches, node_unfit_reason


def node(name: str = "n1", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": spec}


def affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": list(expressions)}]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


@pytest.mark.parametrize(
    ("the_pod", "the_node", "reason"),
    [
        (pod(), node(), None),
        (pod(nodeSelector={"gpu": "a100"}), node(labels={"gpu": "a100"}), None),
        (
            pod(nodeSelector={"gpu": "a100"}),
            node(labels={"gpu": "t4"}),
            "node didn't match Pod's node affinity/selector",
        ),
        (
            pod(affinity=affinity({"key": "gpu", "operator": "In", "values": ["a100", "h100"]})),
            node(labels={"gpu": "h100"}),
            None,
        ),
        (
            pod(affinity=affinity({"key": "gpu", "operator": "NotIn", "values": ["t4"]})),
            node(labels={"gpu": "t4"}),
            "node didn't match Pod's node affinity/selector",
        ),
        (
            pod(affinity=affinity({"key": "gpu", "operator": "Exists"})),
            node(),
            "node didn't match Pod's node affinity/selector",
        ),
        (pod(affinity=affinity({"key": "gpu", "operator": "DoesNotExist"})), node(), None),
        (
            pod(affinity=affinity({"key": "cards", "operator": "Gt", "values": ["4"]})),
            node(labels={"cards": "8"}),
            None,
        ),
        (pod(), node(unschedulable=True), "node is unschedulable"),
        (
            pod(),
            node(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
            "node had untolerated taint {gpu: yes}",
        ),
        (pod(), node(taints=[{"key": "gpu", "effect": "PreferNoSchedule"}]), None),
        (
            pod(tolerations=[{"key": "gpu", "operator": "Exists"}]),
            node(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
            None,
        ),
        (
            pod(tolerations=[{"key": "gpu", "value": "no", "effect": "NoSchedule"}]),
            node(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
            "node had untolerated taint {gpu: yes}",
        ),
        (
            pod(tolerations=[{"operator": "Exists"}]),
            node(taints=[{"key": "x", "effect": "NoExecute"}]),
            None,
        ),
    ],
    ids=[
        "plain",
        "selector-match",
        "selector-miss",
        "affinity-in",
        "affinity-notin",
        "affinity-exists",
        "affinity-doesnotexist",
        "affinity-gt",
        "unschedulable",
        "taint",
        "soft-taint",
        "tolerated-exists",
        "toleration-wrong-value",
        "tolerate-everything",
    ],
)
def test_node_fit(the_pod: dict[str, Any], the_node: dict[str, Any], reason: str | None) -> None:
    """Each pod/node pair fits or is refused with kube-scheduler's kind of reason."""
    assert node_unfit_reason(the_pod, the_node) == reason


def test_node_selector_match_fields_selects_by_name() -> None:
    """An allocation's nodeSelector (matchFields metadata.name In [n]) selects only that node."""
    selector = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
        ]
    }
    assert [node_selector_matches(selector, node(n)) for n in ("n1", "n2")] == [False, True]
    assert node_selector_matches(None, node("n1"))
