"""The driver name flows into every object that names it, and the DeviceClasses are the API's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deploy.chartkit import (
    DEFAULT_DRIVER,
    Rendered,
    containers,
    env_of,
    render,
    walk_strings,
)

from dra_driver.api.classes import default_device_classes
from dra_driver.api.driver import DriverNames

CUSTOM = "gpu.example.com"
CASE_OF = {DEFAULT_DRIVER: "defaults", CUSTOM: "custom-driver-name"}


def without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in obj["metadata"].items() if k != "labels"}
    return {**obj, "metadata": metadata}


@pytest.mark.parametrize("driver", [DEFAULT_DRIVER, CUSTOM])
def test_device_classes_are_the_api_default_classes(
    rendered: Callable[[str], Rendered], driver: str
) -> None:
    """The chart's DeviceClasses equal dra_driver.api.classes.default_device_classes, exactly."""
    r = rendered(CASE_OF[driver])
    chart = [without_labels(c) for c in r.of_kind("DeviceClass")]
    expected = default_device_classes(DriverNames.for_driver(driver))
    assert sorted(chart, key=lambda c: c["metadata"]["name"]) == sorted(
        expected, key=lambda c: c["metadata"]["name"]
    )
    for device_class in r.of_kind("DeviceClass"):
        assert device_class["metadata"]["labels"]["app.kubernetes.io/component"] == "device-class"


def test_custom_driver_name_leaves_no_trace_of_the_default(
    rendered: Callable[[str], Rendered],
) -> None:
    """With driverName=gpu.example.com no rendered object mentions gpushare.dra.dev anywhere."""
    r = rendered("custom-driver-name")
    assert DEFAULT_DRIVER not in r.text
    for obj in r.objects:
        assert not [s for s in walk_strings(obj) if DEFAULT_DRIVER in s], obj["metadata"]["name"]
    # ...and the default render does name it, so the check above is not vacuous.
    assert DEFAULT_DRIVER in rendered("defaults").text


def test_custom_driver_name_reaches_every_derived_name(
    rendered: Callable[[str], Rendered],
) -> None:
    """Gate, webhooks, plugin dir, Lease, opt-out label and the VAP all derive from driverName."""
    names = DriverNames.for_driver(CUSTOM)
    r = rendered("custom-driver-name")
    controller = containers(r.one("Deployment"))[0]
    plugin = containers(r.one("DaemonSet"))[0]
    # DRIVER_NAME is what the finalizer, the gate and the CDI kind derive from in the code.
    assert env_of(controller)["DRIVER_NAME"] == names.driver
    assert env_of(plugin)["DRIVER_NAME"] == names.driver
    assert env_of(plugin)["PLUGIN_DIR"] == f"/var/lib/kubelet/plugins/{names.driver}"
    mounts = {m["mountPath"] for m in plugin["volumeMounts"]}
    assert f"/var/lib/kubelet/plugins/{names.driver}" in mounts
    # The gate's webhook and the validating webhook carry the name.
    gate = r.one("MutatingWebhookConfiguration")["webhooks"][0]
    assert gate["name"] == f"gate.{names.driver}"
    assert r.one("ValidatingWebhookConfiguration")["webhooks"][0]["name"] == (
        f"validate.{names.driver}"
    )
    opt_out = f"{names.driver}/webhook"
    assert gate["objectSelector"]["matchExpressions"][0]["key"] == opt_out
    for workload in r.of_kind("Deployment") + r.of_kind("DaemonSet"):
        assert workload["spec"]["template"]["metadata"]["labels"][opt_out] == "disabled"
    # The Lease the controller elects on: <driver>-controller.
    lease_rule = [rule for rule in r.one("Role")["rules"] if "resourceNames" in rule]
    assert lease_rule[0]["resourceNames"] == [f"{names.driver}-controller"]
    # The plugin may only write its own driver's slices.
    checks = r.one("ValidatingAdmissionPolicy")["spec"]["validations"]
    assert any(f'== "{names.driver}"' in c["expression"] for c in checks)
    # The classes' configs name the config API version of this driver.
    configs = [
        c["spec"]["config"][0]["opaque"] for c in r.of_kind("DeviceClass") if "config" in c["spec"]
    ]
    assert {c["driver"] for c in configs} == {names.driver}
    assert {c["parameters"]["apiVersion"] for c in configs} == {names.config_api_version}


def test_two_releases_do_not_collide_on_cluster_scoped_names(helm: Path) -> None:
    """Two releases (each with its own driver name) give cluster-scoped objects distinct names."""
    first = render(helm, {"driverName": "a.example.com"}, release="first")
    second = render(helm, {"driverName": "b.example.com"}, release="second")
    cluster_scoped = (
        "ClusterRole",
        "ClusterRoleBinding",
        "DeviceClass",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    )
    for kind in cluster_scoped:
        assert first.names(kind)
        assert not set(first.names(kind)) & set(second.names(kind)), kind


def test_an_extended_resource_name_goes_on_the_default_class_only(helm: Path) -> None:
    """deviceClasses.extendedResourceName: the class <driver> carries it, as the API says."""
    r = render(helm, {"deviceClasses": {"extendedResourceName": "nvidia.com/gpu"}})
    chart = sorted(
        (without_labels(c) for c in r.of_kind("DeviceClass")), key=lambda c: c["metadata"]["name"]
    )
    names = DriverNames.for_driver(DEFAULT_DRIVER)
    expected = default_device_classes(names, extended_resource_name="nvidia.com/gpu")
    assert chart == sorted(expected, key=lambda c: c["metadata"]["name"])
    assert [c["metadata"]["name"] for c in chart if "extendedResourceName" in c["spec"]] == [
        DEFAULT_DRIVER
    ]


@pytest.mark.parametrize(
    ("release", "prefix"),
    [
        ("gpushare", "gpushare"),
        ("gpushare-dra-driver", "gpushare-dra-driver"),
        ("gpushare-dra-driver-prod", "gpushare-dra-driver-prod"),
        ("prod", "prod-gpushare-dra-driver"),
    ],
)
def test_a_release_name_holding_the_chart_name_or_held_by_it_names_the_objects(
    helm: Path, release: str, prefix: str
) -> None:
    """The chart name is added only when neither name contains the other, as README says."""
    rendered = render(helm, release=release)
    assert rendered.names("Deployment") == [f"{prefix}-controller"]
    assert rendered.names("DaemonSet") == [f"{prefix}-kubelet-plugin"]
