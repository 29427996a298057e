"""gate.mode: the MutatingAdmissionPolicy that gates pods inside kube-apiserver, and its webhook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cel
import kubernetes_validate
import pytest
from deploy.chartkit import (
    Rendered,
    containers,
    env_of,
    render,
    validate,
    webhook,
)
from webhook import kit

from dra_driver.api import DriverNames
from dra_driver.webhook.admission import Admission

MAP_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
POLICY_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")


def rendered_with(helm: Path, *api_versions: str, **gate: Any) -> Rendered:
    """Render the chart as a cluster serving ``api_versions`` would get it, with ``gate`` values."""
    return render(helm, {"gate": gate} if gate else None, api_versions=api_versions)


def policy_env(r: Rendered) -> str:
    """Return the controller's POLICY_GATE setting."""
    (container,) = containers(r.one("Deployment"))
    return str(env_of(container)["POLICY_GATE"])


def pod_condition(r: Rendered) -> str:
    """Return the mutating webhook's pod match condition."""
    (condition,) = webhook(r, "MutatingWebhookConfiguration")["matchConditions"]
    return str(condition["expression"])


@pytest.mark.parametrize(
    ("api_versions", "mode", "policy"),
    [
        ((), "auto", False),
        ((MAP_API,), "auto", True),
        ((), "policy", True),
        ((MAP_API,), "webhook", False),
    ],
    ids=["auto-old-cluster", "auto-1.36", "policy-forced", "webhook-forced"],
)
def test_the_mode_decides_who_gates(
    helm: Path, api_versions: tuple[str, ...], mode: str, policy: bool
) -> None:
    """auto picks the policy exactly where the API server serves it; the others are obeyed."""
    r = rendered_with(helm, *api_versions, mode=mode)
    assert bool(r.of_kind("MutatingAdmissionPolicy")) is policy
    assert bool(r.of_kind("MutatingAdmissionPolicyBinding")) is policy
    assert policy_env(r) == ("true" if policy else "false")


def test_no_policy_without_the_gate(helm: Path) -> None:
    """gate.enabled=false installs neither the policy nor the webhook's pod gate."""
    r = rendered_with(helm, MAP_API, enabled=False, mode="policy")
    assert not r.of_kind("MutatingAdmissionPolicy")
    assert policy_env(r) == "false"


def test_policy_names_follow_the_driver_name(helm: Path) -> None:
    """The gate, label and annotation in the policy are the ones the driver derives."""
    names = DriverNames.for_driver("gpu.example.com")
    r = render(helm, {"driverName": "gpu.example.com", "gate": {"mode": "policy"}})
    policy = r.one("MutatingAdmissionPolicy")
    binding = r.one("MutatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["paramRef"]["selector"]["matchLabels"] == {names.policy_gate: "true"}
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"
    (mutation,) = policy["spec"]["mutations"]
    expression = mutation["applyConfiguration"]["expression"]
    assert f'{{"{names.policy_gate}": "true"}}' in expression
    assert f'name: "{names.scheduling_gate}"' in expression
    assert "gpushare.dra.dev" not in expression
    assert policy["spec"]["paramKind"] == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
    }
    # The same namespaces and opt-out label as the webhook's.
    hook = webhook(r, "MutatingWebhookConfiguration")
    assert binding["spec"]["matchResources"]["namespaceSelector"] == hook["namespaceSelector"]
    assert binding["spec"]["matchResources"]["objectSelector"] == hook["objectSelector"]


@pytest.mark.parametrize("version", ["1.36.0", "1.37.0"])
def test_policy_objects_validate_where_they_are_served(helm: Path, version: str) -> None:
    """The policy and its binding pass kubernetes-validate --strict for 1.36 and 1.37."""
    r = rendered_with(helm, mode="policy")
    for kind in POLICY_KINDS:
        validate(r.one(kind), version)


@pytest.mark.parametrize("version", ["1.34.0", "1.35.0"])
def test_policy_kind_is_unknown_before_136(helm: Path, version: str) -> None:
    """1.34 and 1.35 have no MutatingAdmissionPolicy v1: why `auto` checks what is served."""
    r = rendered_with(helm, mode="policy")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        validate(r.one("MutatingAdmissionPolicy"), version)


def policy_gated(pod: dict[str, Any]) -> dict[str, Any]:
    """Return ``pod`` as the policy leaves a pod it gated: the gate and the annotation."""
    gated = kit.pod(*pod["spec"].get("resourceClaims", []), gates=[kit.GATE])
    gated["metadata"]["annotations"] = {kit.NAMES.policy_gate: "true"}
    return gated


def test_webhook_skips_only_the_pods_the_policy_gated(helm: Path) -> None:
    """In policy mode the webhook is not sent a policy-gated pod, but is sent every other one."""
    expression = pod_condition(rendered_with(helm, MAP_API))
    one_share = kit.pod(kit.from_template("share"))
    assert cel.evaluate(expression, {"object": one_share})
    assert not cel.evaluate(expression, {"object": policy_gated(one_share)})
    # A user's own gate, or the annotation alone, is still reviewed.
    assert cel.evaluate(
        expression, {"object": kit.pod(kit.from_template("share"), gates=[kit.GATE])}
    )
    annotated = kit.pod(kit.from_template("share"))
    annotated["metadata"]["annotations"] = {kit.NAMES.policy_gate: "true"}
    assert cel.evaluate(expression, {"object": annotated})
    assert not cel.evaluate(expression, {"object": kit.pod()})
    # Webhook mode: the condition does not look at gates or annotations at all.
    plain = pod_condition(render(helm, {"gate": {"mode": "webhook"}}))
    assert cel.evaluate(plain, {"object": policy_gated(one_share)})


def _uses(name: str, *, sidecar: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": "i",
        "resources": {"claims": [{"name": "gpu"}]},
    }
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


POLICY_GATES = {
    "one container": kit.pod(kit.from_template("share"), containers=[_uses("a")]),
    "an init container before it": kit.pod(
        kit.from_template("share"), initContainers=[_uses("init")], containers=[_uses("a")]
    ),
    "a second container without the claim": kit.pod(
        kit.from_template("share"), containers=[_uses("a"), {"name": "b", "image": "i"}]
    ),
    "a sidecar alone": kit.pod(
        kit.from_template("share"),
        initContainers=[_uses("s", sidecar=True)],
        containers=[{"name": "b", "image": "i"}],
    ),
}


@pytest.mark.parametrize("case", sorted(POLICY_GATES))
def test_a_pod_the_policy_gates_needs_only_the_gate_of_the_webhook(case: str) -> None:
    """Such a pod (one claim, a one-request template, one user at a time): the webhook only gates.

    So skipping its review loses no refusal; the real policy's choices are checked on a real
    API server (tests/realk8s/test_gate_policy.py).
    """
    cluster = kit.FakeCluster(templates={("default", "share"): kit.share_template()})
    outcome = Admission(kit.NAMES, cluster).mutate(kit.review(POLICY_GATES[case]))
    assert outcome.result == "patched"
    assert kit.decoded_patch(kit.response(outcome.body)) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": kit.GATE}]}
    ]
