"""Every example manifest under deploy/examples validates for Kubernetes 1.34-1.37."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from deploy.chartkit import CRD_KINDS, EXAMPLES, KUBE_VERSIONS, ROOT

from dra_driver.nvml.inventory import InventoryError, parse_inventory

FILES = sorted([*EXAMPLES.rglob("*.yaml"), *EXAMPLES.rglob("*.yml")])


def test_there_are_examples_to_validate() -> None:
    """deploy/examples holds manifests (an empty glob would make the next test vacuous)."""
    assert FILES, f"no YAML under {EXAMPLES}"


def manifests(path: Path) -> list[dict[str, object]]:
    """Return the Kubernetes objects of ``path``; a GPU inventory (for plan) has none."""
    text = path.read_text()
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    objects = [d for d in docs if isinstance(d, dict) and "apiVersion" in d and "kind" in d]
    if objects:
        assert len(objects) == len(docs), f"{path}: a document without apiVersion and kind"
        return objects
    try:
        parse_inventory(text, str(path))
    except InventoryError as exc:
        pytest.fail(f"{path}: neither Kubernetes objects nor a GPU inventory: {exc}")
    return []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_validates_on_every_supported_version(path: Path) -> None:
    """Each object of the example file passes kubernetes-validate --strict on 1.34-1.37."""
    objects = manifests(path)
    if not objects:
        pytest.skip(f"{path.name} is a GPU inventory for `gpushare-dra plan`, not manifests")
    for version in KUBE_VERSIONS:
        for obj in objects:
            if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                name = obj.get("metadata", {}).get("name")  # type: ignore[union-attr]
                pytest.fail(f"{path.name}: {obj['kind']} {name} on {version}: {exc}")


def pod_specs(obj: dict[str, object]) -> list[dict[str, object]]:
    """Return the pod spec of a Pod, or the pod template's spec of a workload; else none."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    if obj["kind"] == "Pod":
        return [spec]
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        return [template["spec"]]
    return []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_names_no_node_so_it_runs_on_any_cluster(path: Path) -> None:
    """No pod of an example is tied to a node by name, selector or node affinity."""
    specs = [spec for obj in manifests(path) for spec in pod_specs(obj)]
    for spec in specs:
        assert "nodeName" not in spec, path.name
        assert "nodeSelector" not in spec, path.name
        affinity = spec.get("affinity")
        assert not (isinstance(affinity, dict) and "nodeAffinity" in affinity), path.name
    assert specs or not manifests(path), f"{path.name}: objects, yet no pod to check"
