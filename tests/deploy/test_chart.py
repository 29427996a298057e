"""The chart lints, renders valid objects for Kubernetes 1.34-1.37, and refuses bad values."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from deploy.chartkit import (
    CHART,
    CRD_KINDS,
    KUBE_VERSIONS,
    MATRIX,
    NAMESPACE,
    RELEASE,
    HelmError,
    Rendered,
    run_helm,
    validate,
)

from dra_driver import __version__
from dra_driver.api import Backend, Placement
from dra_driver.api.driver import DriverNames, InvalidDriverNameError
from dra_driver.logging import LOG_LEVELS, LogFormat
from dra_driver.publishing.slices import UNHEALTHY_TAINT_EFFECTS

CASES = sorted(MATRIX)


@pytest.mark.parametrize("case", CASES)
def test_chart_lints_strictly(helm: Path, case: str) -> None:
    """`helm lint --strict` passes with the defaults and with every values case of the matrix."""
    out = run_helm(helm, "lint", "--strict", str(CHART), values=MATRIX[case])
    assert "0 chart(s) failed" in out
    assert "[WARNING]" not in out
    assert "[ERROR]" not in out


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_every_rendered_object_validates(
    rendered: Callable[[str], Rendered], case: str, version: str
) -> None:
    """Each object of each case passes kubernetes-validate --strict; only CRD kinds are skipped."""
    objects = rendered(case).objects
    assert objects
    checked = 0
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue
        try:
            validate(obj, version)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} on {version}: {exc}")
        checked += 1
    assert checked >= 15


def test_crd_kinds_are_really_unknown_to_kubernetes_validate() -> None:
    """The skipped kinds are exactly the ones kubernetes-validate has no schema for."""
    for api_version, kind in CRD_KINDS:
        doc = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)


def test_matrix_cases_render_what_they_switch(rendered: Callable[[str], Rendered]) -> None:
    """Each matrix case changes the objects it is meant to change (the matrix is not a no-op)."""
    kinds = {case: {o["kind"] for o in rendered(case).objects} for case in CASES}
    assert "MutatingWebhookConfiguration" in kinds["defaults"]
    assert "Secret" in kinds["defaults"]
    assert "ValidatingWebhookConfiguration" not in kinds["webhook-off"]
    assert {"Certificate", "Issuer", "ServiceMonitor"} <= kinds["cert-manager"]
    assert "Secret" not in kinds["cert-manager"]
    # all-options turns the gate off: only the capacity check is left in the mutating hook.
    (mutating,) = rendered("all-options").of_kind("MutatingWebhookConfiguration")
    assert [hook["name"] for hook in mutating["webhooks"]] == ["capacity.gpushare.dra.dev"]
    assert "Issuer" not in kinds["all-options"]  # a ClusterIssuer of the user's is referenced
    assert len(rendered("all-options").of_kind("DaemonSet")) == 2  # plugin and installer
    options = rendered("operator-options")
    assert "Secret" not in kinds["operator-options"]  # the operator's own TLS Secret
    assert "gpushare-controller" not in options.names("ServiceAccount")  # an existing one
    assert "minAvailable" in options.one("PodDisruptionBudget")["spec"]
    assert "Job" in kinds["defaults"]
    assert "Job" in kinds["operator-options"]  # the uninstall cleanup hook


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"driverName": "BAD_NAME"}, "at '/driverName': 'BAD_NAME' does not match pattern"),
        ({"driverName": "nodot"}, "at '/driverName': 'nodot' does not match pattern"),
        ({"driverName": "a" * 60 + ".dev"}, "at '/driverName'"),
        (
            {"kubeletPlugin": {"backend": "cuda"}},
            "at '/kubeletPlugin/backend': value must be one of 'hami-core', 'mps', 'none'",
        ),
        ({"webhook": {"port": -1}}, "at '/webhook/port': minimum: got -1, want 1"),
        ({"controller": {"metricsPort": -5}}, "at '/controller/metricsPort': minimum: got -5"),
        ({"kubeletPlugin": {"metricsPort": 70000}}, "at '/kubeletPlugin/metricsPort': maximum"),
        ({"controller": {"placement": {"node": "random"}}}, "at '/controller/placement/node'"),
        ({"logging": {"level": "loud"}}, "at '/logging/level'"),
        ({"webhok": {"enabled": False}}, "additional properties 'webhok' not allowed"),
        ({"kubeletPlugin": {"cdiRoot": "var/run/cdi"}}, "at '/kubeletPlugin/cdiRoot'"),
        (
            {"deviceClasses": {"extendedResourceName": "gpu"}},
            "at '/deviceClasses/extendedResourceName'",
        ),
        (
            {"kubeletPlugin": {"unhealthyTaintEffect": "PreferNoSchedule"}},
            "at '/kubeletPlugin/unhealthyTaintEffect': value must be one of 'NoSchedule'",
        ),
    ],
    ids=lambda v: json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else "",
)
def test_schema_rejects_bad_values(helm: Path, values: dict[str, object], message: str) -> None:
    """`helm template` fails with the schema's message for a bad value, before rendering."""
    with pytest.raises(HelmError) as failure:
        run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=values)
    assert "values don't meet the specifications of the schema" in str(failure.value)
    assert message in str(failure.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"controller": {"replicas": 2, "leaderElection": {"enabled": False}}},
            "needs controller.replicas=1",
        ),
        (
            {"controller": {"leaderElection": {"leaseDuration": 5, "renewDeadline": 10}}},
            "leaseDuration > renewDeadline > 1.2 * retryPeriod",
        ),
        (
            {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
        (
            {"webhook": {"port": 8080}},
            "webhook.port and controller.metricsPort must differ",
        ),
        (
            {"deviceClasses": {"extendedResourceName": "kubernetes.io/gpu"}},
            "an extended resource is named outside kubernetes.io",
        ),
        (
            {"kubeletPlugin": {"updateStrategy": {"maxSurge": "0%", "maxUnavailable": 0}}},
            "maxSurge and maxUnavailable cannot both be 0",
        ),
    ],
)
def test_chart_refuses_inconsistent_values(
    helm: Path, values: dict[str, object], message: str
) -> None:
    """Combinations the schema cannot express fail the render with a reason."""
    with pytest.raises(HelmError, match=re.escape(message)):
        run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=values)


@pytest.mark.parametrize("namespace", [None, "default"])
def test_chart_refuses_the_default_namespace(helm: Path, namespace: str | None) -> None:
    """Without -n (or with -n default) the render fails and says which -n to use instead."""
    args = ["--namespace", namespace] if namespace else []
    with pytest.raises(HelmError) as failure:
        run_helm(helm, "template", RELEASE, str(CHART), *args)
    message = str(failure.value)
    assert 'the release namespace is "default"' in message
    assert "-n gpushare --create-namespace" in message
    # Any other namespace renders, and the webhooks exclude that one instead.
    objects = Rendered.parse(
        run_helm(helm, "template", RELEASE, str(CHART), "--namespace", "gpushare-system")
    )
    config = objects.one("MutatingWebhookConfiguration")
    (excluded,) = config["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert "gpushare-system" in excluded["values"]
    assert "default" not in excluded["values"]


def test_chart_refuses_kubernetes_before_1_34(helm: Path) -> None:
    """kubeVersion >=1.34.0-0: a 1.33 cluster (no resource.k8s.io/v1) is refused."""
    with pytest.raises(HelmError, match=r"incompatible with Kubernetes v1\.33"):
        run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", "1.33.0")
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == ">=1.34.0-0"


def test_chart_app_version_is_the_package_version() -> None:
    """The image tag defaults to appVersion, which must be the version the image is built at."""
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"] == __version__


# -- values.yaml and values.schema.json --------------------------------------------------------

# Maps whose entries are Kubernetes fields or user data, documented by their parent's comment.
FREE_FORM = {
    "resources",
    "affinity",
    "tolerations",
    "nodeSelector",
    "podAnnotations",
    "commonLabels",
    "labels",
    "issuerRef",
    "imagePullSecrets",
    "excludeNamespaces",
    "podSecurityContext",
}


def test_values_are_documented_line_by_line() -> None:
    """Every key of values.yaml (outside free-form maps) has a comment line right above it."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented: list[str] = []
    skip_deeper_than: int | None = None
    for number, line in enumerate(lines, start=1):
        match = re.match(r"^(\s*)([A-Za-z][\w-]*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        if skip_deeper_than is not None:
            if indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        previous = lines[number - 2].strip() if number > 1 else ""
        if not previous.startswith("#"):
            undocumented.append(f"values.yaml:{number}: {key}")
        if key in FREE_FORM:
            skip_deeper_than = indent
    assert undocumented == []


def schema() -> dict[str, object]:
    return json.loads((CHART / "values.schema.json").read_text())


def test_default_values_satisfy_the_schema() -> None:
    """values.yaml itself validates against values.schema.json (draft 2020-12)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft202012Validator(schema()).validate(values)


def test_schema_enums_are_the_cli_choices() -> None:
    """The schema allows exactly the backends, placements and log settings the CLI accepts."""
    props = schema()["properties"]
    assert isinstance(props, dict)
    plugin, controller, logging = (
        props["kubeletPlugin"]["properties"],
        props["controller"]["properties"],
        props["logging"]["properties"],
    )
    assert plugin["backend"]["enum"] == [b.value for b in Backend]
    assert plugin["unhealthyTaintEffect"]["enum"] == list(UNHEALTHY_TAINT_EFFECTS)
    for key in ("gpuOnline", "gpuOffline", "node"):
        assert set(controller["placement"]["properties"][key]["enum"]) == {
            p.value for p in Placement
        }
    assert logging["level"]["enum"] == list(LOG_LEVELS)
    assert set(logging["format"]["enum"]) == {f.value for f in LogFormat}


@pytest.mark.parametrize(
    "name",
    [
        "gpushare.dra.dev",
        "gpu.example.com",
        "a.b",
        "x-1.y-2.z",
        "nodot",
        "BAD.name",
        "-a.b",
        "a-.b",
        "a..b",
        "a.b.",
        "a_b.c",
        "a" * 59 + ".dev",
        "a" * 60 + ".dev",
        "",
    ],
)
def test_schema_driver_name_rule_is_the_driver_rule(name: str) -> None:
    """The schema accepts a driverName exactly when the driver itself would start with it."""
    rule = schema()["properties"]["driverName"]  # type: ignore[index]
    schema_ok = jsonschema.Draft202012Validator(rule).is_valid(name)
    try:
        DriverNames.for_driver(name)
        driver_ok = True
    except InvalidDriverNameError:
        driver_ok = False
    assert schema_ok == driver_ok
