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
    containers,
    deep_merge,
    env_of,
    render,
    run_helm,
    validate,
)

from dra_driver import __version__
from dra_driver.cli.main import build_parser

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
        ({}, f"gpushare-dra-driver:{__version__}", "projecthami/hami:v2.8.2"),
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
            f"mirror.internal/gpushare-dra-driver:{__version__}",
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
    assert set(images(r).values()) == {f"gpushare-dra-driver:{__version__}"}
    kubernetes_validate.validate(r.one("Deployment"), KUBE_VERSIONS[-1], strict=True)


# -- extra arguments and environment -----------------------------------------------------------

EXTRA_ENV = [
    {"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"},
    {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
]


@pytest.mark.parametrize(
    ("component", "kind", "name", "subcommand"),
    [
        ("controller", "Deployment", "gpushare-controller", "controller"),
        ("kubeletPlugin", "DaemonSet", "gpushare-kubelet-plugin", "kubelet-plugin"),
    ],
)
def test_extra_args_and_env_reach_the_component(
    helm: Path, component: str, kind: str, name: str, subcommand: str
) -> None:
    """extraArgs follow the subcommand and parse; extraEnv entries come after the chart's."""
    values = {component: {"extraArgs": ["--log-level=debug"], "extraEnv": EXTRA_ENV}}
    r = render(helm, values)
    (container,) = containers(r.one(kind, name))
    assert container["args"] == [subcommand, "--log-level=debug"]
    parsed = build_parser().parse_args(container["args"])
    assert (parsed.command, parsed.log_level) == (subcommand, "debug")
    assert container["env"][-2:] == EXTRA_ENV
    assert env_of(container)["LOG_LEVEL"] == "info"  # the chart's own stay; the flag wins
    others = [
        w for w in r.of_kind("Deployment") + r.of_kind("DaemonSet") if w is not r.one(kind, name)
    ]
    assert others
    for other in others:  # per component, not global
        assert "HTTPS_PROXY" not in env_of(containers(other)[0])
    validates_everywhere(r)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"controller": {"extraArgs": "--log-level=debug"}}, "/controller/extraArgs"),
        ({"kubeletPlugin": {"extraArgs": [3]}}, "/kubeletPlugin/extraArgs/0"),
        ({"controller": {"extraEnv": [{"value": "x"}]}}, "/controller/extraEnv/0"),
        ({"kubeletPlugin": {"extraEnv": [{"name": "A=B"}]}}, "/kubeletPlugin/extraEnv/0/name"),
        ({"webhook": {"extraArgs": []}}, "/webhook"),
    ],
    ids=lambda v: json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else v,
)
def test_schema_refuses_malformed_extras(helm: Path, values: dict[str, Any], where: str) -> None:
    """Extras are lists of strings and of named env vars; the webhook (no workload) has none."""
    message = refused(helm, values)
    assert "values don't meet the specifications of the schema" in message
    assert f"at '{where}" in message


# -- pod security contexts ---------------------------------------------------------------------


def test_pod_security_contexts_default_and_merge(helm: Path) -> None:
    """The controller defaults to the non-root user; overrides merge, null drops a key."""
    default = render(helm)
    controller = default.one("Deployment")["spec"]["template"]["spec"]
    assert controller["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "securityContext" not in default.one("DaemonSet")["spec"]["template"]["spec"]
    r = render(
        helm,
        {
            "controller": {"podSecurityContext": {"fsGroup": 2000, "runAsGroup": None}},
            "kubeletPlugin": {"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}},
        },
    )
    controller = r.one("Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert controller == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "fsGroup": 2000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    plugin = r.one("DaemonSet")["spec"]["template"]["spec"]
    assert plugin["securityContext"] == {"seccompProfile": {"type": "Unconfined"}}
    assert plugin["containers"][0]["securityContext"]["privileged"] is True  # unchanged
    validates_everywhere(r)


# -- service accounts --------------------------------------------------------------------------


def subjects(r: Rendered) -> set[str]:
    bindings = r.of_kind("ClusterRoleBinding") + r.of_kind("RoleBinding")
    return {s["name"] for b in bindings for s in b["subjects"]}


def test_existing_service_accounts_get_the_chart_rbac(helm: Path) -> None:
    """create=false: no account is created, the pods, bindings and VAP use the named one."""
    r = render(
        helm,
        {
            "controller": {"serviceAccount": {"create": False, "name": "ops-controller"}},
            "kubeletPlugin": {"serviceAccount": {"create": False, "name": "ops-plugin"}},
        },
    )
    assert "ops-controller" not in r.names("ServiceAccount")
    assert "ops-plugin" not in r.names("ServiceAccount")
    assert {"ops-controller", "ops-plugin"} <= subjects(r)
    assert not {"gpushare-controller", "gpushare-kubelet-plugin"} & subjects(r)
    accounts = {name: pod["serviceAccountName"] for name, pod in pod_templates(r)}
    assert accounts["gpushare-controller"] == "ops-controller"
    assert accounts["gpushare-kubelet-plugin"] == "ops-plugin"
    (condition,) = r.one("ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    assert condition["expression"].endswith(f':{NAMESPACE}:ops-plugin"')
    validates_everywhere(r)


def test_created_service_accounts_take_a_name_and_annotations(helm: Path) -> None:
    """create=true with a name and annotations: that account, annotated, bound and used."""
    annotations = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/gpushare"}
    r = render(
        helm, {"controller": {"serviceAccount": {"name": "gpu-ctl", "annotations": annotations}}}
    )
    account = r.one("ServiceAccount", "gpu-ctl")
    assert account["metadata"]["annotations"] == annotations
    assert "annotations" not in r.one("ServiceAccount", "gpushare-kubelet-plugin")["metadata"]
    assert "gpu-ctl" in subjects(r)
    assert r.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "gpu-ctl"


@pytest.mark.parametrize("component", ["controller", "kubeletPlugin"])
def test_an_existing_service_account_must_be_named(helm: Path, component: str) -> None:
    """create=false without a name would bind the driver's RBAC to nothing: refused."""
    message = refused(helm, {component: {"serviceAccount": {"create": False}}})
    assert f"{component}.serviceAccount.name is needed" in message


@pytest.mark.parametrize(
    ("values", "where"),
    [
        (
            {"controller": {"serviceAccount": {"name": "Bad_Name"}}},
            "/controller/serviceAccount/name",
        ),
        (
            {"kubeletPlugin": {"serviceAccount": {"create": "no"}}},
            "/kubeletPlugin/serviceAccount/create",
        ),
        ({"controller": {"serviceAccount": {"automount": True}}}, "/controller/serviceAccount"),
    ],
    ids=lambda v: json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else v,
)
def test_schema_refuses_malformed_service_accounts(
    helm: Path, values: dict[str, Any], where: str
) -> None:
    """A name that is no DNS subdomain, a non-boolean create, an unknown key: refused."""
    message = refused(helm, values)
    assert "values don't meet the specifications of the schema" in message
    assert f"at '{where}" in message


# -- PodDisruptionBudget -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ({}, {"maxUnavailable": 1}),
        ({"maxUnavailable": "50%"}, {"maxUnavailable": "50%"}),
        ({"maxUnavailable": 2}, {"maxUnavailable": 2}),
        ({"minAvailable": "50%"}, {"minAvailable": "50%"}),
        ({"minAvailable": 1, "maxUnavailable": "25%"}, {"minAvailable": 1}),
        ({"minAvailable": 0}, {"minAvailable": 0}),
    ],
    ids=["default", "max-percent", "max-int", "min-percent", "min-wins", "min-zero"],
)
def test_disruption_budget_takes_a_number_or_a_percentage(
    helm: Path, budget: dict[str, Any], expected: dict[str, Any]
) -> None:
    """maxUnavailable or (when set) minAvailable, an int or an "N%" string, as policy/v1 wants."""
    r = render(helm, {"controller": {"podDisruptionBudget": budget}})
    pdb = r.one("PodDisruptionBudget")
    assert {k: v for k, v in pdb["spec"].items() if k != "selector"} == expected
    for version in KUBE_VERSIONS:
        validate(pdb, version)


@pytest.mark.parametrize(
    "budget",
    [
        {"maxUnavailable": 0},
        {"maxUnavailable": "0%"},
        {"maxUnavailable": "150%"},
        {"maxUnavailable": "half"},
        {"maxUnavailable": 1.5},
        {"minAvailable": "-10%"},
        {"minAvailable": -1},
    ],
    ids=lambda v: json.dumps(v, separators=(",", ":")),
)
def test_schema_refuses_budgets_that_are_no_number_or_percentage(
    helm: Path, budget: dict[str, Any]
) -> None:
    """A budget blocking every drain (0), over 100%, or not a count is refused by the schema."""
    message = refused(helm, {"controller": {"podDisruptionBudget": budget}})
    assert "values don't meet the specifications of the schema" in message
    (key,) = budget
    assert f"at '/controller/podDisruptionBudget/{key}'" in message


@pytest.mark.parametrize("effect", [None, "NoExecute"])
def test_the_unhealthy_taint_effect_reaches_the_plugin(helm: Path, effect: str | None) -> None:
    """kubeletPlugin.unhealthyTaintEffect becomes UNHEALTHY_TAINT_EFFECT, NoSchedule by default."""
    values = {"kubeletPlugin": {"unhealthyTaintEffect": effect}} if effect else {}
    plugin = render(helm, values).one("DaemonSet", "gpushare-kubelet-plugin")
    env = env_of(containers(plugin)[0])
    assert env["UNHEALTHY_TAINT_EFFECT"] == (effect or "NoSchedule")


def test_the_plugin_rollout_and_the_controller_scheduling_follow_the_values(helm: Path) -> None:
    """The plugin's rolling update is set by values; the controller tolerates GPU nodes."""
    default = render(helm)
    plugin = default.one("DaemonSet", "gpushare-kubelet-plugin")["spec"]["updateStrategy"]
    assert plugin["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    controller = default.one("Deployment", "gpushare-controller")["spec"]["template"]["spec"]
    assert controller["priorityClassName"] == "system-cluster-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in controller[
        "tolerations"
    ]
    faster = {"kubeletPlugin": {"updateStrategy": {"maxSurge": "10%", "maxUnavailable": 0}}}
    rolled = render(helm, faster).one("DaemonSet", "gpushare-kubelet-plugin")["spec"]
    assert rolled["updateStrategy"]["rollingUpdate"] == {"maxSurge": "10%", "maxUnavailable": 0}


def test_network_policies_admit_only_the_webhook_metrics_api_server_and_dns(helm: Path) -> None:
    """networkPolicy.enabled: one policy per component, with exactly the documented traffic."""
    assert render(helm).of_kind("NetworkPolicy") == []
    api_server = [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}]
    values = {
        "networkPolicy": {
            "enabled": True,
            "metricsFrom": prometheus,
            "webhookFrom": api_server,
            "apiServer": {"ports": [6443], "to": api_server},
        }
    }
    rendered = render(helm, values)
    policies = {p["metadata"]["name"]: p["spec"] for p in rendered.of_kind("NetworkPolicy")}
    assert set(policies) == {"gpushare-controller", "gpushare-kubelet-plugin"}
    for version in KUBE_VERSIONS:
        for policy in rendered.of_kind("NetworkPolicy"):
            kubernetes_validate.validate(policy, version, strict=True)
    controller, plugin = policies["gpushare-controller"], policies["gpushare-kubelet-plugin"]
    assert controller["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"
    assert controller["ingress"] == [
        {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": prometheus},
        {"ports": [{"port": "webhook", "protocol": "TCP"}], "from": api_server},
    ]
    assert plugin["ingress"] == [controller["ingress"][0]]
    for spec in (controller, plugin):
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        assert spec["egress"] == [
            {"ports": [{"port": 6443, "protocol": "TCP"}], "to": api_server},
            {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        ]
