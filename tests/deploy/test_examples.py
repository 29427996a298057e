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
