"""Manifests as the simulation applies them: file order, workloads expanded, step labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from gpushare_simulator.settings import DEFAULT_INVENTORY
from gpushare_simulator.simulate.actions import Apply
from gpushare_simulator.simulate.command import examples_dir
from gpushare_simulator.simulate.manifests import (
    HOSTNAME_LABEL,
    ManifestError,
    load_manifest,
    parse_manifest,
)
from gpushare_simulator.simulate.scenarios import SCENARIOS, Scenario

from dra_driver.api import MAX_PARAMETERS_BYTES
from dra_driver.nvml.inventory import builtin_inventory

ROOT = Path(__file__).resolve().parents[2]

WORKLOAD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: share}
spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: x}}]}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, labels: {step: two}}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: infer}}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: share}]
      containers: [{name: c, image: i}]
---
apiVersion: v1
kind: Pod
metadata: {name: solo, namespace: other}
spec: {containers: [{name: c, image: i}]}
"""


def test_documents_keep_file_order_and_workloads_become_pods() -> None:
    """A Deployment of 2 replicas becomes pods infer-0 and infer-1 with the template's labels."""
    manifest = parse_manifest(WORKLOAD, "w.yaml")
    assert [d.reference for d in manifest.documents] == [
        "ResourceClaimTemplate/share",
        "Deployment/infer",
        "Pod/solo",
    ]
    infer = manifest.documents[1]
    assert [p["metadata"] for p in infer.pods] == [
        {"name": "infer-0", "labels": {"app": "infer"}},
        {"name": "infer-1", "labels": {"app": "infer"}},
    ]
    assert infer.pods[0]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "share"
    assert (manifest.documents[0].step, infer.step) == (None, "two")


def test_in_namespace_fills_only_missing_namespaces() -> None:
    """Documents without a namespace move to the run's; an explicit one stays."""
    documents = [d.in_namespace("sim") for d in parse_manifest(WORKLOAD, "w.yaml").documents]
    assert documents[0].body["metadata"]["namespace"] == "sim"
    assert [p["metadata"]["namespace"] for p in documents[1].pods] == ["sim", "sim"]
    assert documents[2].pods[0]["metadata"]["namespace"] == "other"


def test_a_bad_manifest_names_the_file_and_document(tmp_path: Path) -> None:
    """An unknown template, bad YAML or a missing file is refused with where it is."""
    broken = WORKLOAD.replace("resourceClaimTemplateName: share", "resourceClaimTemplateName: x")
    with pytest.raises(ManifestError, match=r"^w.yaml: document 2 \(Deployment infer\): "):
        parse_manifest(broken, "w.yaml")
    with pytest.raises(ManifestError, match="invalid YAML at line 1"):
        parse_manifest("a: [", "w.yaml")
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "missing.yaml")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_scenario_step_applies_something(scenario: Scenario) -> None:
    """Each Apply step of a scenario selects at least one document of its manifest."""
    manifest = load_manifest(examples_dir() / scenario.manifest)
    steps = {d.step for d in manifest.documents}
    for step in scenario.steps:
        for action in step.actions:
            if isinstance(action, Apply) and action.step is not None:
                assert action.step in steps, (step.title, action.step)


def test_examples_are_plain_kubernetes_objects_without_gates() -> None:
    """The examples are ready for kubectl: known kinds, a comment first, no scheduling gates."""
    kinds = {
        "ResourceClaimTemplate", "ResourceClaim", "Deployment", "Job", "Pod", "GpuShareQuota",
        "PodDisruptionBudget",
    }  # fmt: skip
    for scenario in SCENARIOS:
        path = ROOT / "deploy" / "examples" / scenario.manifest
        text = path.read_text()
        assert text.startswith(f"# Acceptance scenario {scenario.name} ")
        assert "schedulingGates" not in text
        for document in yaml.safe_load_all(text):
            assert document["kind"] in kinds, (path.name, document["kind"])


def test_the_too_large_example_is_over_the_api_limit() -> None:
    """bad-input's too-large config is bigger than the API server allows in parameters."""
    documents = list(yaml.safe_load_all((ROOT / "deploy/examples/bad-input.yaml").read_text()))
    (too_large,) = [d for d in documents if d["metadata"]["name"] == "too-large"]
    parameters = too_large["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert len(json.dumps(parameters, separators=(",", ":"))) > MAX_PARAMETERS_BYTES


def test_pinned_adds_the_hostname_to_each_pod_and_keeps_the_original() -> None:
    """A pin joins each pod's nodeSelector; the document it came from and non-pods stay as read."""
    text = WORKLOAD.replace("spec: {containers:", "spec: {nodeSelector: {gpu: t4}, containers:")
    template, infer, solo = parse_manifest(text, "w.yaml").documents
    assert template.pinned("node-2") is template
    assert [p["spec"]["nodeSelector"] for p in infer.pinned("node-2").pods] == [
        {HOSTNAME_LABEL: "node-2"},
        {HOSTNAME_LABEL: "node-2"},
    ]
    assert solo.pinned("node-1").pods[0]["spec"]["nodeSelector"] == {
        "gpu": "t4",
        HOSTNAME_LABEL: "node-1",
    }
    assert "nodeSelector" not in infer.pods[0]["spec"]
    assert solo.pods[0]["spec"]["nodeSelector"] == {"gpu": "t4"}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_scenario_pins_the_pods_it_applies_to_a_node_of_its_inventory(
    scenario: Scenario,
) -> None:
    """The example files name no node, so each Apply that makes pods names a qgpu-runbook node."""
    nodes = {node.name for node in builtin_inventory(DEFAULT_INVENTORY).nodes}
    manifest = load_manifest(examples_dir() / scenario.manifest)
    pods_applied = 0
    for step in scenario.steps:
        for action in step.actions:
            if not isinstance(action, Apply):
                continue
            chosen = [d for d in manifest.documents if action.step in (None, d.step)]
            if any(d.pods for d in chosen):
                pods_applied += 1
                assert action.node in nodes, (scenario.name, step.title, action.node)
    assert pods_applied > 0
