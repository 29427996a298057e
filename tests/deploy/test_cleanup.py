"""The uninstall cleanup hook: a post-delete Job running `gpushare-dra cleanup` for the release."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from deploy.chartkit import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    HelmError,
    Rendered,
    containers,
    notes,
    render,
    run_helm,
    validate,
)

from dra_driver.cli.flags import settings_from_arguments
from dra_driver.cli.main import COMMANDS, build_parser
from dra_driver.settings import CommonSettings

NAME = "gpushare-cleanup"
HOOK_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job")
DELETE_POLICY = "before-hook-creation,hook-succeeded"


def cleanup_objects(r: Rendered) -> list[dict[str, Any]]:
    """Return the objects of the cleanup component."""
    return [
        o
        for o in r.objects
        if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "cleanup"
    ]


def job_args(r: Rendered) -> list[str]:
    (container,) = containers(r.one("Job"))
    return list(container["args"])


def flag(args: list[str], name: str) -> str:
    """Return the value after ``name`` in ``args`` (flags are given as two items)."""
    return args[args.index(name) + 1]


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Evaluate a label selector of `k=v` and `k in (a,b)` terms, as the API server would."""
    for term in re.split(r",(?![^()]*\))", selector):
        found = re.fullmatch(r"\s*([\w./-]+)\s+in\s+\(([^)]*)\)\s*", term)
        if found:
            values = {v.strip() for v in found[2].split(",")}
            if labels.get(found[1]) not in values:
                return False
            continue
        key, value = term.split("=", 1)
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def pod_labels(workload: Mapping[str, Any]) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


def test_cleanup_hook_renders_by_default_as_post_delete_hook_objects(
    rendered: Callable[[str], Rendered],
) -> None:
    """SA, ClusterRole, binding and Job; all post-delete hooks, deleted once they succeeded."""
    r = rendered("defaults")
    objects = cleanup_objects(r)
    assert sorted(o["kind"] for o in objects) == sorted(HOOK_KINDS)
    weights = {}
    for obj in objects:
        assert obj["metadata"]["name"] == NAME
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-delete"
        assert annotations["helm.sh/hook-delete-policy"] == DELETE_POLICY
        weights[obj["kind"]] = int(annotations["helm.sh/hook-weight"])
    # Helm creates hooks lowest weight first: the account and its rights exist before the Job.
    assert weights["ServiceAccount"] < weights["ClusterRoleBinding"] < weights["Job"]
    assert weights["ClusterRole"] < weights["ClusterRoleBinding"]
    # No other object of the chart is a delete hook: the release's own objects go first. (The
    # `helm test` pod is a hook too, run only by `helm test`.)
    others = [o for o in r.objects if o not in objects]
    assert {_hook(o) for o in others} == {None, "test"}


def test_cleanup_hook_is_not_rendered_when_disabled(helm: Path) -> None:
    """cleanup.enabled=false: no cleanup object and no hook at all."""
    r = render(helm, {"cleanup": {"enabled": False}})
    assert cleanup_objects(r) == []
    assert r.of_kind("Job") == []
    assert {_hook(o) for o in r.objects} == {None, "test"}
    assert len(cleanup_objects(render(helm))) == len(HOOK_KINDS)  # on by default


def _hook(obj: dict[str, Any]) -> str | None:
    """Return the object's Helm hook, or None for an object of the release."""
    hook: str | None = (obj["metadata"].get("annotations") or {}).get("helm.sh/hook")
    return hook


def test_cleanup_job_runs_the_command_for_this_release(rendered: Callable[[str], Rendered]) -> None:
    """cleanup --driver-name, --namespace, --wait-for-pods, --wait-timeout, in that image."""
    r = rendered("custom-driver-name")
    args = job_args(r)
    assert args[0] == "cleanup"
    assert flag(args, "--driver-name") == "gpu.example.com"
    assert flag(args, "--namespace") == NAMESPACE
    assert flag(args, "--wait-timeout") == "120"
    assert flag(args, "--log-level") == "info"
    assert "--kubeconfig" not in args  # in the cluster: the in-cluster config
    (controller,) = containers(r.one("Deployment"))
    (container,) = containers(r.one("Job", NAME))
    assert container["image"] == controller["image"]
    job = r.one("Job", NAME)
    assert job["metadata"]["namespace"] == NAMESPACE
    assert job["spec"]["backoffLimit"] == 2
    assert job["spec"]["activeDeadlineSeconds"] == 240
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == NAME


def test_the_wait_selector_matches_the_driver_pods_and_not_the_job(helm: Path) -> None:
    """The selector picks this release's controller and plugin pods, never the Job's own pod."""
    r = render(helm, {"hamiCore": {"installer": {"enabled": True}}})
    selector = flag(job_args(r), "--wait-for-pods")
    assert selector_matches(selector, pod_labels(r.one("Deployment", "gpushare-controller")))
    assert selector_matches(selector, pod_labels(r.one("DaemonSet", "gpushare-kubelet-plugin")))
    assert not selector_matches(selector, pod_labels(r.one("Job", NAME)))
    # The installer neither gates nor finalizes anything: no need to wait for it.
    installer = r.one("DaemonSet", "gpushare-hami-core-installer")
    assert not selector_matches(selector, pod_labels(installer))
    # Another release's driver pods in the same namespace are not waited for.
    other = render(helm, release="other")
    assert not selector_matches(selector, pod_labels(other.one("Deployment")))
    assert selector_matches(
        flag(job_args(other), "--wait-for-pods"), pod_labels(other.one("Deployment"))
    )


def test_selector_matcher_reads_set_based_terms() -> None:
    """The test's selector evaluator itself: `in` lists and equality terms, all required."""
    selector = "a=1,b in (x,y)"
    assert selector_matches(selector, {"a": "1", "b": "y"})
    assert not selector_matches(selector, {"a": "1", "b": "z"})
    assert not selector_matches(selector, {"b": "x"})


def test_cleanup_job_runs_unprivileged_and_ungated(rendered: Callable[[str], Rendered]) -> None:
    """Non-root, read-only root filesystem, no capabilities; opted out of our webhook."""
    job = rendered("defaults").one("Job", NAME)
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert job["spec"]["template"]["metadata"]["labels"]["gpushare.dra.dev/webhook"] == "disabled"


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_cleanup_objects_validate_on_every_version(helm: Path, version: str) -> None:
    """Each hook object, with every cleanup value set, passes kubernetes-validate --strict."""
    r = render(
        helm,
        {
            "cleanup": {
                "waitTimeout": 60,
                "backoffLimit": 0,
                "activeDeadlineSeconds": 90,
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"operator": "Exists"}],
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 1,
                                "preference": {
                                    "matchExpressions": [
                                        {"key": "role", "operator": "In", "values": ["infra"]}
                                    ]
                                },
                            }
                        ]
                    }
                },
            },
            "imagePullSecrets": [{"name": "registry"}],
        },
    )
    objects = cleanup_objects(r)
    assert len(objects) == len(HOOK_KINDS)
    for obj in objects:
        validate(obj, version)
    job = r.one("Job", NAME)
    assert flag(job_args(r), "--wait-timeout") == "60"
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 90)
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "registry"}]


def test_cleanup_deadline_must_leave_time_after_the_wait(helm: Path) -> None:
    """activeDeadlineSeconds <= waitTimeout would kill the Job before it cleans: refused."""
    values = {"cleanup": {"waitTimeout": 300, "activeDeadlineSeconds": 300}}
    with pytest.raises(HelmError, match=r"cleanup\.activeDeadlineSeconds must exceed"):
        run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=values)
    values["cleanup"]["enabled"] = False  # type: ignore[index]
    assert cleanup_objects(render(helm, values)) == []


@pytest.mark.parametrize(
    ("cleanup", "where"),
    [
        ({"waitTimeout": 0}, "/cleanup/waitTimeout"),
        ({"backoffLimit": -1}, "/cleanup/backoffLimit"),
        ({"activeDeadlineSeconds": "5m"}, "/cleanup/activeDeadlineSeconds"),
        ({"enabled": "yes"}, "/cleanup/enabled"),
        ({"ttl": 5}, "/cleanup"),
    ],
)
def test_schema_refuses_bad_cleanup_values(helm: Path, cleanup: dict[str, Any], where: str) -> None:
    """Timeouts are positive integers, retries non-negative, keys known."""
    with pytest.raises(HelmError) as failure:
        render(helm, {"cleanup": cleanup})
    assert "values don't meet the specifications of the schema" in str(failure.value)
    assert f"at '{where}" in str(failure.value)


def test_the_cli_accepts_the_job_arguments(rendered: Callable[[str], Rendered]) -> None:
    """The Job's arguments parse, as `gpushare-dra cleanup` would read them, to what they mean."""
    args = job_args(rendered("custom-driver-name"))
    parsed = build_parser().parse_args(args)
    assert parsed.command == "cleanup"
    (command,) = [c for c in COMMANDS if c.name == "cleanup"]
    common = settings_from_arguments(CommonSettings, parsed, {}, env_prefix=command.env_prefix)
    assert common.driver_name == "gpu.example.com"
    (settings_class,) = command.settings
    settings = settings_from_arguments(settings_class, parsed, {}, env_prefix=command.env_prefix)
    assert settings.namespace == NAMESPACE
    assert settings.wait_timeout == 120
    assert settings.wait_for_pods == flag(args, "--wait-for-pods")
    assert settings.kubeconfig is None  # in the cluster: the pod's service account
    assert settings.dry_run is False


@pytest.mark.parametrize("enabled", [True, False])
def test_notes_say_what_uninstall_runs(helm: Path, enabled: bool) -> None:
    """NOTES name the cleanup Job helm uninstall runs, only when it is enabled."""
    text = notes(helm, {"cleanup": {"enabled": enabled}})
    assert (f"then runs the Job {NAME}" in text) is enabled
