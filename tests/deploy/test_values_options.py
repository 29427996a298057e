"""Operator options (images, extras, security contexts, accounts, PDB) reach their objects."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from deploy.chartkit import (
    CHART,
    CRD_KINDS,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    HelmError,
    Rendered,
    deep_merge,
    render,
    run_helm,
    validate,
)

DIGEST = "sha256:" + "0123456789abcdef" * 4
INSTALLER_ON = {"hamiCore": {"installer": {"enabled": True}}}


def pod_templates(r: Rendered) -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of every Deployment, DaemonSet and Job rendered."""
    for kind in ("Deployment", "DaemonSet", "Job"):
        for workload in r.of_kind(kind):
            yield workload["metadata"]["name"], workload["spec"]["template"]["spec"]


def images(r: Rendered) -> dict[str, str]:
    """Workload name -> the image of its (single) container."""
    found = {}
    for name, pod in pod_templates(r):
        (container,) = pod["containers"]
        found[name] = container["image"]
    return found


def validates_everywhere(r: Rendered) -> None:
    """Every object of ``r`` (CRD kinds aside) validates strictly on every supported version."""
    for obj in r.objects:
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue
        for version in KUBE_VERSIONS:
            validate(obj, version)


def refused(helm: Path, values: dict[str, Any]) -> str:
    """Return helm's error for rendering ``values``; fail if it renders."""
    with pytest.raises(HelmError) as failure:
        run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=values)
    return str(failure.value)


# -- images ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "driver", "installer"),
    [
        ({}, "gpushare-dra-driver:0.1.0", "projecthami/hami:v2.8.2"),
        (
            {"image": {"registry": "registry.example.com:5000", "tag": "1.2.3"}},
            "registry.example.com:5000/gpushare-dra-driver:1.2.3",
            "projecthami/hami:v2.8.2",
        ),
        (
            {"image": {"registry": "registry.example.com/gpu/", "tag": "1.2.3", "digest": DIGEST}},
            f"registry.example.com/gpu/gpushare-dra-driver@{DIGEST}",
            "projecthami/hami:v2.8.2",
        ),
        (
            {
                "global": {"imageRegistry": "mirror.internal"},
                "image": {"registry": "registry.example.com"},
                "hamiCore": {"installer": {"image": {"digest": DIGEST}}},
            },
            "mirror.internal/gpushare-dra-driver:0.1.0",
            f"mirror.internal/projecthami/hami@{DIGEST}",
        ),
    ],
    ids=["defaults", "registry", "digest-wins", "global-registry"],
)
def test_image_reference_is_registry_repository_and_digest_or_tag(
    helm: Path, values: dict[str, Any], driver: str, installer: str
) -> None:
    """global.imageRegistry > image.registry; a digest wins over the tag; every workload."""
    r = render(helm, deep_merge(INSTALLER_ON, values))
    found = images(r)
    assert found.pop("gpushare-hami-core-installer") == installer
    assert found  # the controller, the plugin, and the cleanup Job when it renders
    assert set(found.values()) == {driver}
    script = r.one("DaemonSet", "gpushare-hami-core-installer")["spec"]["template"]["spec"]
    assert f"in image {installer};" in script["containers"][0]["args"][0]
    validates_everywhere(r)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
        ({"image": {"tag": "1.0@sha256:" + "0" * 64}}, "/image/tag"),
        ({"image": {"registry": "https://registry.example.com"}}, "/image/registry"),
        ({"global": {"imageRegistry": "mirror internal"}}, "/global/imageRegistry"),
        ({"hamiCore": {"installer": {"image": {"digest": "md5"}}}}, "/hamiCore/installer/image"),
    ],
    ids=lambda v: json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else v,
)
def test_schema_refuses_malformed_image_fields(
    helm: Path, values: dict[str, Any], where: str
) -> None:
    """A digest, tag or registry that could not form an image reference fails the install."""
    message = refused(helm, values)
    assert "values don't meet the specifications of the schema" in message
    assert f"at '{where}" in message


def test_installer_image_needs_a_tag_or_a_digest(helm: Path) -> None:
    """An empty tag without a digest would render `projecthami/hami:`; the chart says so."""
    values = {"hamiCore": {"installer": {"enabled": True, "image": {"tag": ""}}}}
    assert "hamiCore.installer.image needs a tag or a digest" in refused(helm, values)
    values["hamiCore"]["installer"]["image"]["digest"] = DIGEST
    assert images(render(helm, values))["gpushare-hami-core-installer"].endswith(DIGEST)


def test_global_values_of_a_parent_chart_are_accepted(helm: Path) -> None:
    """global stays open: a parent chart's own global values do not fail the schema."""
    r = render(helm, {"global": {"storageClass": "fast", "imageRegistry": ""}})
    assert set(images(r).values()) == {"gpushare-dra-driver:0.1.0"}
    kubernetes_validate.validate(r.one("Deployment"), KUBE_VERSIONS[-1], strict=True)
