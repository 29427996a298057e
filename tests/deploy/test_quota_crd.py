"""The GpuShareQuota CRD as the chart renders it: its group, its switch, and what its schema says.

What a real API server accepts and refuses under this schema is checked on one in
tests/realk8s/test_quota_schema.py; here, that the patterns admit nothing the driver's own
quota reader (dra_driver/quota/model.py) would refuse, and that every printer column shows a
field the schema declares.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deploy.chartkit import DEFAULT_DRIVER, MATRIX, Rendered, deep_merge, render
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.api import DriverNames
from dra_driver.quota import QuotaSpecError, parse_quota

KIND = "CustomResourceDefinition"


def crd(r: Rendered) -> dict[str, Any]:
    """Return the one GpuShareQuota CRD of a render."""
    (found,) = [o for o in r.of_kind(KIND) if o["spec"]["names"]["kind"] == "GpuShareQuota"]
    return found


def version_of(definition: dict[str, Any]) -> dict[str, Any]:
    (version,) = definition["spec"]["versions"]
    return dict(version)


def hard_schema(definition: dict[str, Any], resource: str) -> dict[str, Any]:
    """Return the schema of ``spec.hard.<resource>``."""
    schema = version_of(definition)["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["spec"]["properties"]["hard"]["properties"][resource])


@pytest.fixture(scope="module")
def default_crd(rendered: Callable[[str], Rendered]) -> dict[str, Any]:
    return crd(rendered("defaults"))


def test_the_crd_is_named_and_grouped_by_the_default_driver_name(
    default_crd: dict[str, Any],
) -> None:
    """gpusharequotas.<driverName>, group <driverName>, Namespaced, v1alpha1 with /status."""
    assert default_crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert default_crd["metadata"]["name"] == f"gpusharequotas.{DEFAULT_DRIVER}"
    spec = default_crd["spec"]
    assert spec["group"] == DEFAULT_DRIVER
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == DriverNames.for_driver(DEFAULT_DRIVER).quota_plural
    version = version_of(default_crd)
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert (DEFAULT_DRIVER, version["name"]) == DriverNames.for_driver(
        DEFAULT_DRIVER
    ).quota_group_version
    assert version["subresources"] == {"status": {}}


def test_another_driver_name_gets_its_own_crd(rendered: Callable[[str], Rendered]) -> None:
    """driverName gpu.example.com: gpusharequotas.gpu.example.com in group gpu.example.com."""
    custom = crd(rendered("custom-driver-name"))
    assert custom["metadata"]["name"] == "gpusharequotas.gpu.example.com"
    assert custom["spec"]["group"] == "gpu.example.com"
    assert DEFAULT_DRIVER not in str(custom)


def test_the_crd_is_kept_on_uninstall(default_crd: dict[str, Any]) -> None:
    """helm.sh/resource-policy: keep, so `helm uninstall` never deletes every namespace's quotas."""
    assert default_crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_install_crd_false_leaves_the_crd_out(helm: Path) -> None:
    """quotas.installCRD=false renders no CRD (GitOps manages it); the RBAC for quotas stays."""
    values = deep_merge(MATRIX["defaults"], {"quotas": {"installCRD": False}})
    r = render(helm, values)
    assert r.of_kind(KIND) == []
    role = r.one("ClusterRole", "gpushare-controller")
    assert any("gpusharequotas" in rule["resources"] for rule in role["rules"])


def test_the_schema_is_structural_where_it_matters(default_crd: dict[str, Any]) -> None:
    """hard: at least one of cores, memory, cards, each int-or-string; priority an enum."""
    schema = version_of(default_crd)["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["hard"]
    hard = spec["properties"]["hard"]
    assert hard["minProperties"] == 1
    assert set(hard["properties"]) == {"cores", "memory", "cards"}
    assert "additionalProperties" not in hard  # structural: unknown keys are pruned or refused
    for field in hard["properties"].values():
        assert field["x-kubernetes-int-or-string"] is True
        assert field["minimum"] == 0
        assert "type" not in field
    assert spec["properties"]["priority"]["enum"] == ["online", "offline"]
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "x-kubernetes-preserve-unknown-fields" not in str(schema)


def _declared(schema: dict[str, Any], json_path: str) -> bool:
    """Whether ``json_path`` (a printer column's) walks through declared properties only.

    ``metadata`` is ObjectMeta, which the API server knows without a schema.
    """
    if json_path.startswith(".metadata."):
        return True
    node = schema
    for name, selector in re.findall(r"\.(\w+)(\[[^\]]*\])?", json_path):
        properties = node.get("properties") or {}
        if name not in properties:
            return False
        node = properties[name]
        if selector:
            node = node["items"]
    return True


def test_every_printer_column_shows_a_declared_field(default_crd: dict[str, Any]) -> None:
    """A typo in a column's jsonPath would show an empty column for ever: each path exists."""
    version = version_of(default_crd)
    schema = version["schema"]["openAPIV3Schema"]
    columns = version["additionalPrinterColumns"]
    for column in columns:
        assert _declared(schema, column["jsonPath"]), column
    paths = {column["jsonPath"] for column in columns}
    for resource in ("cores", "memory", "cards"):
        assert {f".status.used.{resource}", f".spec.hard.{resource}"} <= paths
    assert '.status.conditions[?(@.type=="Exceeded")].status' in paths


# -- the patterns admit only what the driver's reader accepts -----------------------------------


def _quota(resource: str, value: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "gpu"},
        "spec": {"hard": {resource: value}},
    }


def _pattern_strategy(field: dict[str, Any]) -> st.SearchStrategy[str]:
    return st.from_regex(field["pattern"], fullmatch=True).filter(
        lambda s: len(s) <= field["maxLength"]
    )


@pytest.mark.parametrize("resource", ["cores", "memory", "cards"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_value_the_schema_admits_the_driver_can_enforce(
    default_crd: dict[str, Any], resource: str, data: st.DataObject
) -> None:
    """A string the CRD's pattern admits is one parse_quota accepts: no stored quota is ignored."""
    value = data.draw(_pattern_strategy(hard_schema(default_crd, resource)))
    try:
        parse_quota(_quota(resource, value))
    except QuotaSpecError as exc:
        pytest.fail(f"the CRD admits spec.hard.{resource}={value!r}, the driver refuses: {exc}")


@pytest.mark.parametrize(
    ("resource", "value", "admitted"),
    [
        ("memory", "40Gi", True),
        ("memory", "512Mi", True),
        ("memory", "1073741824", True),
        ("memory", "0.5Gi", True),
        ("memory", "1e9", True),
        ("memory", "1e40", True),
        ("memory", "1e41", False),  # beyond any device; the driver's parser refuses it too
        ("memory", "lots", False),
        ("memory", "-1Gi", False),
        ("memory", "1 Gi", False),
        ("memory", "1gi", False),
        ("cores", "150", True),
        ("cores", "0", True),
        ("cores", "1.5", False),
        ("cores", "-1", False),
        ("cores", "1e2", False),  # whole, but written as a plain number
        ("cards", "4", True),
        ("cards", "1k", False),
    ],
)
def test_the_patterns_on_known_values(
    default_crd: dict[str, Any], resource: str, value: str, admitted: bool
) -> None:
    """The quantities users write pass; malformed, negative or fractional ones do not."""
    pattern = hard_schema(default_crd, resource)["pattern"]
    assert bool(re.fullmatch(pattern, value)) is admitted
