"""gate.mode=policy on a real 1.36 API server: pods gated inside it, the webhook only where needed.

The suite's chart is installed with `gate.mode: auto`, which the real API server (it serves
MutatingAdmissionPolicy v1) turns into the policy. The policy's CEL and its per-template
evaluation run in kube-apiserver itself, so only a real one can show them working.
"""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from dra_driver.k8s.objects import Object
from realk8s.kit import NAMES, Cluster

TEMPLATES = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: share}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpushare.dra.dev
          capacity: {requests: {cores: "20", memory: 2Gi}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: pair}
spec:
  spec:
    devices:
      requests:
      - {name: a, exactly: {deviceClassName: gpushare.dra.dev, capacity: {requests: {cores: "10"}}}}
      - {name: b, exactly: {deviceClassName: gpushare.dra.dev, capacity: {requests: {cores: "10"}}}}
"""
POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeSelector: {{kubernetes.io/hostname: node-2}}
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: {template}}}]
  containers:
{containers}
"""
USES_GPU = "  - {{name: {name}, image: busybox, resources: {{claims: [{{name: gpu}}]}}}}"


def pod(name: str, template: str, *containers: str) -> str:
    """Return a pod of ``containers`` (each using the claim), its one claim from ``template``."""
    lines = "\n".join(USES_GPU.format(name=c) for c in containers)
    return POD.format(name=name, template=template, containers=lines)


def applied(cluster: Cluster, namespace: str, text: str) -> Object:
    """Return the pod ``kubectl apply`` created, as admission left it (before the controller)."""
    created: Object = json.loads(
        cluster.kubectl("apply", "-n", namespace, "-f", "-", "-o", "json", stdin=text).stdout
    )
    return created


def reviews(cluster: Cluster, kind: str = "Pod") -> float:
    """Return how many reviews of ``kind`` the webhook has answered."""
    status, text = cluster.driver.webhook_get("/metrics")
    assert status == 200
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gpushare_webhook_requests_total" and sample.labels["kind"] == kind
    )


def test_a_one_share_pod_and_its_claim_need_no_review_and_it_runs(
    cluster: Cluster, namespace: str
) -> None:
    """Template marked at creation; pod gated in kube-apiserver; no review of pod or claim."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=TEMPLATES)
    labels = {
        name: cluster.json("resourceclaimtemplate", name, "-n", namespace)["metadata"].get(
            "labels", {}
        )
        for name in ("share", "pair")
    }
    assert labels["share"] == {NAMES.policy_gate: "true"}
    assert NAMES.policy_gate not in labels["pair"]  # two requests: the webhook must see pods

    pods, claims = reviews(cluster), reviews(cluster, "ResourceClaim")
    created = applied(cluster, namespace, pod("one", "share", "c"))
    assert created["metadata"]["annotations"][NAMES.policy_gate] == "true"
    assert {"name": NAMES.scheduling_gate} in created["spec"]["schedulingGates"]
    running = cluster.wait(lambda: cluster.running(namespace, "one"), "one to run", namespace)
    assert cluster.env(running, "c")["CUDA_DEVICE_SM_LIMIT_0"] == "20"
    # Neither the pod nor the claim generated for it went to the webhook.
    assert (reviews(cluster), reviews(cluster, "ResourceClaim")) == (pods, claims)


def test_pods_the_policy_does_not_gate_are_still_reviewed(cluster: Cluster, namespace: str) -> None:
    """Two containers on one share, or two requests: the webhook refuses, as without the policy."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=TEMPLATES)
    before = reviews(cluster)
    for name, template, containers in (("two", "share", ("a", "b")), ("both", "pair", ("a",))):
        text = pod(name, template, *containers)
        refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=text, check=False)
        assert refused.returncode != 0, name
        assert "denied the request" in refused.stderr, refused.stderr
    assert reviews(cluster) == before + 2
    # A pod of the two-request template whose container names one request: reviewed, gated.
    one_request = "claims: [{name: gpu, request: a}]"
    text = pod("named", "pair", "a").replace("claims: [{name: gpu}]", one_request)
    created = applied(cluster, namespace, text)
    assert NAMES.policy_gate not in (created["metadata"].get("annotations") or {})
    assert {"name": NAMES.scheduling_gate} in created["spec"]["schedulingGates"]
    assert reviews(cluster) == before + 3


def test_a_template_keeps_its_mark_when_applied_again_server_side(
    cluster: Cluster, namespace: str
) -> None:
    """A GitOps re-apply (server-side, same manager, no label in it) leaves the template marked."""
    share = TEMPLATES.split("---\n", maxsplit=1)[0]
    for team in ("a", "b"):
        labelled = share.replace("{name: share}", f"{{name: share, labels: {{team: {team}}}}}")
        cluster.kubectl(
            "apply", "--server-side", "--field-manager", "gitops", "-n", namespace, "-f", "-",
            stdin=labelled,
        )  # fmt: skip
        meta = cluster.json("resourceclaimtemplate", "share", "-n", namespace)["metadata"]
        assert meta.get("labels") == {NAMES.policy_gate: "true", "team": team}
