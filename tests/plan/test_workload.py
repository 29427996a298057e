"""Workload files: which pods they create, which claims each pod uses, and refused input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from plan.builders import EXAMPLE, claim, deployment, dump, pod, template

from dra_driver.plan.errors import PlanInputError
from dra_driver.plan.workload import load_workload, parse_workload


def _error(text: str) -> str:
    with pytest.raises(PlanInputError) as caught:
        parse_workload(textwrap.dedent(text), "work.yaml")
    return str(caught.value)


def test_deployment_becomes_replicas_pods_each_with_its_own_claim() -> None:
    """A Deployment of 3 gives pods infer-0..2, each with a claim generated from the template."""
    text = dump(template("t", cores="40", memory="5Gi"), deployment("infer", 3, "t"))
    pods = parse_workload(text, "work.yaml").pods
    assert [p.name for p in pods] == ["infer-0", "infer-1", "infer-2"]
    assert {p.owner for p in pods} == {"Deployment/infer"}
    claims = [p.claims[0].claim for p in pods]
    assert [c["metadata"]["name"] for c in claims] == ["infer-0-gpu", "infer-1-gpu", "infer-2-gpu"]
    assert len({c["metadata"]["uid"] for c in claims}) == 3
    requested = claims[0]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
    assert requested == {"cores": "40", "memory": "5Gi"}
    assert not any(p.claims[0].shared for p in pods)


def test_job_becomes_parallelism_pods_and_other_kinds_default_to_one() -> None:
    """A Job runs ``parallelism`` pods (not completions); StatefulSet/ReplicaSet default to 1."""
    text = """\
        apiVersion: batch/v1
        kind: Job
        metadata: {name: batch}
        spec: {parallelism: 2, completions: 8, template: {spec: {containers: []}}}
        ---
        apiVersion: apps/v1
        kind: StatefulSet
        metadata: {name: db}
        spec: {template: {spec: {containers: []}}}
        ---
        apiVersion: apps/v1
        kind: ReplicaSet
        metadata: {name: rs}
        spec: {replicas: 0, template: {spec: {containers: []}}}
        """
    pods = parse_workload(textwrap.dedent(text), "work.yaml").pods
    assert [(p.owner, p.name) for p in pods] == [
        ("Job/batch", "batch-0"),
        ("Job/batch", "batch-1"),
        ("StatefulSet/db", "db-0"),
    ]


def test_templates_may_follow_the_pods_and_namespaces_are_kept() -> None:
    """A template later in the file is found; pod, claim and template share the namespace."""
    text = """\
        apiVersion: v1
        kind: Namespace
        metadata: {name: ml}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: ml}
        spec: {resourceClaims: [{name: gpu, resourceClaimTemplateName: t}]}
        ---
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaimTemplate
        metadata: {name: t, namespace: ml}
        spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: c}}]}}}
        """
    (planned,) = parse_workload(textwrap.dedent(text), "work.yaml").pods
    assert (planned.namespace, planned.name) == ("ml", "p")
    metadata = planned.claims[0].claim["metadata"]
    assert (metadata["namespace"], metadata["name"]) == ("ml", "p-gpu")


def test_a_named_claim_is_one_claim_shared_by_every_pod() -> None:
    """Pods naming the same ResourceClaim get the very same claim (same UID), marked shared."""
    text = dump(
        claim("team", cores="10", memory="1Gi"),
        pod("a", claims=["team"]),
        pod("b", claims=["team"]),
    )
    a, b = parse_workload(text, "work.yaml").pods
    assert [a.claims[0].shared, b.claims[0].shared] == [True, True]
    assert a.claims[0].claim["metadata"]["uid"] == b.claims[0].claim["metadata"]["uid"]
    assert a.claims[0].claim["metadata"]["name"] == "team"


def test_device_classes_of_the_file_are_collected() -> None:
    """DeviceClasses in the file come with the workload, for the plan to add to the cluster."""
    text = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: big}\nspec: {}\n"
    workload = parse_workload(text, "work.yaml")
    assert [c["metadata"]["name"] for c in workload.classes] == ["big"]
    assert workload.pods == ()


def test_the_example_file_creates_six_pods() -> None:
    """deploy/examples/plan/scenarios.yaml: 2 replicas, a whole-card pod, 2 Job pods, a giant."""
    workload = load_workload(EXAMPLE)
    assert [p.name for p in workload.pods] == [
        "infer-0",
        "infer-1",
        "trainer",
        "batch-0",
        "batch-1",
        "giant",
    ]


POD, APPS, RESOURCE = "apiVersion: v1\nkind: Pod\n", "apiVersion: apps/v1\n", "resource.k8s.io/v1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "apiVersion: bogus.example/v9\nkind: Pod\nmetadata: {name: a}\nspec: {}\n",
            "work.yaml: document 1 (Pod a): apiVersion: 'bogus.example/v9' does not serve Pod; "
            "allowed: v1",
        ),
        (
            "apiVersion: resource.k8s.io/v1alpha3\nkind: ResourceClaimTemplate\n"
            "metadata: {name: t}\nspec: {spec: {}}\n",
            "work.yaml: document 1 (ResourceClaimTemplate t): apiVersion: "
            "'resource.k8s.io/v1alpha3' does not serve ResourceClaimTemplate; allowed: "
            "resource.k8s.io/v1, resource.k8s.io/v1beta2",
        ),
        (
            f"{POD}metadata: {{name: pödé}}\nspec: {{}}\n",
            "work.yaml: document 1 (Pod pödé): metadata.name: 'pödé' is not a DNS subdomain: at "
            "most 253 characters of lowercase letters, digits, '-' and '.', starting and ending "
            "with a letter or digit",
        ),
        (
            f"{POD}metadata: {{name: a, namespace: ML.team}}\nspec: {{}}\n",
            "work.yaml: document 1 (Pod a): metadata.namespace: 'ML.team' is not a DNS label: at "
            "most 63 characters of lowercase letters, digits and '-', starting and ending with a "
            "letter or digit",
        ),
        (
            "metadata: {name: web}\n",
            "work.yaml: document 1 (no kind web): kind: required",
        ),
        (
            f"{POD}metadata: {{name: a}}\nspec: {{}}\n---\n---\n- a list\n",
            "work.yaml: document 3: expected an object with a kind",
        ),
        (
            f"{POD}spec: {{}}\n",
            "work.yaml: document 1 (Pod): metadata.name: required",
        ),
        (
            f"{APPS}kind: Deployment\nmetadata: {{name: d}}\nspec: {{replicas: two}}\n",
            "work.yaml: document 1 (Deployment d): spec.replicas: expected a whole number, "
            "got 'two'",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {parallelism: 1}\n",
            "work.yaml: document 1 (Job j): spec.template.spec: expected an object",
        ),
        (
            f"{POD}metadata: {{name: a-0}}\nspec: {{}}\n---\n"
            f"{APPS}kind: Deployment\nmetadata: {{name: a}}\nspec: {{template: {{spec: {{}}}}}}\n",
            "work.yaml: document 2 (Deployment a): metadata.name: pod a-0 is also created by "
            "document 1",
        ),
        (
            f"apiVersion: {RESOURCE}\nkind: DeviceClass\nmetadata: {{name: c}}\n---\n"
            f"apiVersion: {RESOURCE}\nkind: DeviceClass\nmetadata: {{name: c}}\n",
            "work.yaml: document 2 (DeviceClass c): metadata.name: a second DeviceClass of "
            "this name",
        ),
        (
            f"{POD}metadata: {{name: a}}\nspec:\n  resourceClaims:\n  - {{name: gpu}}\n",
            "work.yaml: document 1 (Pod a): spec.resourceClaims[0]: pod a entry gpu: needs "
            "exactly one of resourceClaimName and resourceClaimTemplateName",
        ),
        (
            f"{POD}metadata: {{name: a}}\nspec: {{resourceClaims: {{name: gpu}}}}\n",
            "work.yaml: document 1 (Pod a): spec.resourceClaims: expected a list",
        ),
    ],
)
def test_bad_documents_are_refused_naming_document_and_field(text: str, message: str) -> None:
    """Each malformed document is refused with the file, document number, kind, name and field."""
    assert _error(text) == message


def test_documents_of_other_kinds_are_skipped_and_listed() -> None:
    """An application's ConfigMap and Service are not planned, nor refused: they are listed."""
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: ml}\n---\n"
        f"{POD}metadata: {{name: p}}\nspec: {{}}\n---\n"
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
    )
    workload = parse_workload(text, "work.yaml")
    assert workload.skipped == ("ConfigMap ml/app (document 1)", "Service default/web (document 3)")
    assert [p.name for p in workload.pods] == ["p"]


def test_a_missing_template_names_the_pod_and_the_entry() -> None:
    """An entry naming a template the file lacks is refused with the pod, entry and namespace."""
    text = dump(deployment("infer", 2, "nope"))
    with pytest.raises(PlanInputError) as caught:
        parse_workload(text, "work.yaml")
    assert str(caught.value) == (
        "work.yaml: document 1 (Deployment infer): "
        "spec.template.spec.resourceClaims[0].resourceClaimTemplateName: pod infer-0 entry gpu: "
        "no ResourceClaimTemplate 'nope' in namespace 'default' in the file"
    )


def test_a_missing_claim_names_the_pod_and_the_entry() -> None:
    """An entry naming a ResourceClaim of another namespace is not found."""
    other = claim("team", cores="10", memory="1Gi")
    other["metadata"]["namespace"] = "ml"
    with pytest.raises(PlanInputError) as caught:
        parse_workload(dump(other, pod("a", claims=["team"])), "work.yaml")
    assert str(caught.value) == (
        "work.yaml: document 2 (Pod a): spec.resourceClaims[0].resourceClaimName: pod a entry "
        "shared: no ResourceClaim 'team' in namespace 'default' in the file"
    )


def test_invalid_yaml_names_line_and_column() -> None:
    """A YAML syntax error is refused with the file and where the parser stopped."""
    message = _error("kind: Pod\nmetadata: {name: [\n")
    assert message.startswith("work.yaml: invalid YAML at line 3 column 1: ")


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    """A missing file is an input error naming the path, not a traceback."""
    missing = tmp_path / "nope.yaml"
    with pytest.raises(PlanInputError, match=r"nope\.yaml: cannot read: No such file"):
        load_workload(missing)
