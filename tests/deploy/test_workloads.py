"""The Deployment and DaemonSets configure the CLI with settings it has, through flags or env."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy.chartkit import (
    CHART,
    GPU_NODE_LABELS,
    MATRIX,
    Rendered,
    containers,
    env_of,
    render,
)

from dra_driver.cli.flags import env_name, settings_from_arguments
from dra_driver.cli.main import COMMANDS, build_parser
from dra_driver.controller.settings import ControllerSettings
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.kubeletplugin.settings import KubeletPluginSettings
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.settings import CommonSettings
from dra_driver.webhook.settings import WebhookSettings

# Read by the NVIDIA Container Toolkit on the node, not by gpushare-dra.
TOOLKIT_ENV = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}

# Values for the downward-API variables when the settings are resolved in a test.
DOWNWARD = {"NODE_NAME": "node-1", "POD_UID": "0b9c5e2e-0000-4000-8000-000000000001"}


def settings_classes(subcommand: str) -> tuple[type[Any], ...]:
    (command,) = [c for c in COMMANDS if c.name == subcommand]
    return (CommonSettings, *command.settings)


def env_names(subcommand: str) -> set[str]:
    """Every environment variable `gpushare-dra <subcommand>` reads, from its dataclasses."""
    return {
        env_name(field.name)
        for cls in settings_classes(subcommand)
        for field in dataclasses.fields(cls)
    }


def component(r: Rendered, kind: str, name: str) -> dict[str, Any]:
    (container,) = containers(r.one(kind, name))
    return container


# The values key of each subcommand's component.
VALUES_KEY = {"controller": "controller", "kubelet-plugin": "kubeletPlugin"}

WORKLOADS = [
    ("Deployment", "gpushare-controller", "controller"),
    ("DaemonSet", "gpushare-kubelet-plugin", "kubelet-plugin"),
]


@pytest.mark.parametrize("case", sorted(MATRIX))
@pytest.mark.parametrize(("kind", "name", "subcommand"), WORKLOADS)
def test_every_env_var_is_a_setting_of_the_subcommand(
    rendered: Callable[[str], Rendered], case: str, kind: str, name: str, subcommand: str
) -> None:
    """Each env var the chart sets is a settings field of the subcommand it runs (no typos)."""
    container = component(rendered(case), kind, name)
    values = MATRIX[case].get(VALUES_KEY[subcommand], {})
    assert container["args"] == [subcommand, *values.get("extraArgs", [])]
    unknown = set(env_of(container)) - env_names(subcommand) - TOOLKIT_ENV
    assert unknown == set()


@pytest.mark.parametrize("case", sorted(MATRIX))
@pytest.mark.parametrize(("kind", "name", "subcommand"), WORKLOADS)
def test_the_cli_accepts_every_rendered_setting(
    rendered: Callable[[str], Rendered], case: str, kind: str, name: str, subcommand: str
) -> None:
    """The rendered args parse and every env value converts, as the process would at start."""
    container = component(rendered(case), kind, name)
    namespace = build_parser().parse_args(container["args"])
    assert namespace.command == subcommand
    environ = {
        key: DOWNWARD.get(key, "pod-name") if isinstance(value, dict) else value
        for key, value in env_of(container).items()
    }
    for cls in settings_classes(subcommand):
        settings_from_arguments(cls, argparse.Namespace(), environ)  # raises SettingsError


def test_chart_defaults_are_the_cli_defaults(rendered: Callable[[str], Rendered]) -> None:
    """With default values the chart sets what the CLI would default to (one source of truth)."""
    r = rendered("defaults")
    controller = env_of(component(r, "Deployment", "gpushare-controller"))
    plugin = env_of(component(r, "DaemonSet", "gpushare-kubelet-plugin"))
    c, p, w, o = (
        ControllerSettings(),
        KubeletPluginSettings(),
        WebhookSettings(),
        ObservabilitySettings(),
    )
    assert controller["GPU_PLACEMENT_ONLINE"] == c.gpu_placement_online
    assert controller["GPU_PLACEMENT_OFFLINE"] == c.gpu_placement_offline
    assert controller["NODE_PLACEMENT"] == c.node_placement
    assert controller["LEASE_DURATION"] == str(c.lease_duration)
    assert controller["RENEW_DEADLINE"] == str(c.renew_deadline)
    assert controller["RETRY_PERIOD"] == str(c.retry_period)
    assert float(controller["RESYNC_SECONDS"]) == c.resync_seconds
    assert controller["WEBHOOK_PORT"] == str(w.webhook_port)
    assert (controller["TLS_CERT_FILE"], controller["TLS_KEY_FILE"]) == (
        str(w.tls_cert_file),
        str(w.tls_key_file),
    )
    assert controller["METRICS_PORT"] == plugin["METRICS_PORT"] == str(o.metrics_port)
    assert plugin["BACKEND"] == controller["BACKEND"] == p.backend == w.backend
    assert plugin["PLUGIN_REGISTRY_DIR"] == str(p.plugin_registry_dir)
    assert plugin["PLUGIN_DIR"] == str(p.resolved_plugin_dir("gpushare.dra.dev"))
    assert plugin["CDI_ROOT"] == str(p.cdi_root)
    assert plugin["DRIVER_ROOT"] == str(p.driver_root)
    assert plugin["HAMI_CORE_LIBRARY"] == str(p.hami_core_library)
    assert plugin["MPS_PIPE_DIRECTORY"] == str(p.mps_pipe_directory)
    assert controller["DRIVER_NAME"] == plugin["DRIVER_NAME"] == CommonSettings().driver_name
    k = KubeClientSettings()
    for env in (controller, plugin):
        assert float(env["API_CONNECT_TIMEOUT"]) == k.api_connect_timeout
        assert float(env["API_TIMEOUT"]) == k.api_timeout
        assert int(env["WATCH_TIMEOUT"]) == k.watch_timeout


def test_controller_is_leader_elected_in_the_release_namespace(
    rendered: Callable[[str], Rendered],
) -> None:
    """Replicas with leader election, identity from the pod name, Lease in the release ns."""
    r = rendered("defaults")
    deployment = r.one("Deployment", "gpushare-controller")
    assert deployment["spec"]["replicas"] == 2
    env = env_of(containers(deployment)[0])
    assert env["LEADER_ELECT"] == "true"
    assert env["LEADER_ELECTION_NAMESPACE"] == "gpushare"
    assert env["LEADER_ELECTION_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    pdb = r.one("PodDisruptionBudget", "gpushare-controller")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_controller_runs_unprivileged(rendered: Callable[[str], Rendered]) -> None:
    """Non-root, no privilege escalation, no capabilities, read-only root filesystem."""
    deployment = rendered("defaults").one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    security = containers(deployment)[0]["securityContext"]
    assert security == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def host_mounts(daemonset: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """mountPath -> (hostPath, hostPath type) of the plugin's hostPath mounts."""
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    result = {}
    for mount in containers(daemonset)[0]["volumeMounts"]:
        host = volumes[mount["name"]].get("hostPath")
        if host is not None:
            result[mount["mountPath"]] = (host["path"], host.get("type", ""))
    return result


def test_kubelet_plugin_daemonset_is_node_critical_and_privileged(
    rendered: Callable[[str], Rendered],
) -> None:
    """Privileged root, system-node-critical, surge rolling update, downward-API identity."""
    daemonset = rendered("defaults").one("DaemonSet", "gpushare-kubelet-plugin")
    spec = daemonset["spec"]
    assert spec["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = spec["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    container = containers(daemonset)[0]
    assert container["securityContext"]["privileged"] is True
    assert container["securityContext"]["runAsUser"] == 0
    env = env_of(container)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )
    assert {p["name"] for p in container["ports"]} == {"metrics"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"


def node_matches(terms: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies ORed nodeSelectorTerms of In expressions."""
    return any(
        all(
            e["operator"] == "In" and labels.get(e["key"]) in e["values"]
            for e in term["matchExpressions"]
        )
        for term in terms
    )


def test_kubelet_plugin_default_affinity_accepts_any_gpu_node_label(
    rendered: Callable[[str], Rendered],
) -> None:
    """One ORed term per label: a node labelled by any one of them (and only those) gets a pod."""
    r = rendered("all-options")
    for name in ("gpushare-kubelet-plugin", "gpushare-hami-core-installer"):
        pod = r.one("DaemonSet", name)["spec"]["template"]["spec"]
        required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        terms = required["nodeSelectorTerms"]
        assert [[e["key"] for e in t["matchExpressions"]] for t in terms] == [
            [label] for label in GPU_NODE_LABELS
        ]
        for label in GPU_NODE_LABELS:
            assert node_matches(terms, {label: "true"}), label
            assert not node_matches(terms, {label: "false"}), label
        assert not node_matches(terms, {"feature.node.kubernetes.io/pci-1002.present": "true"})
        assert not node_matches(terms, {})


def test_kubelet_plugin_affinity_can_be_replaced(helm: Path) -> None:
    """null drops the default (a nodeSelector then places the pods); a new affinity replaces it."""
    dropped = render(helm, {"kubeletPlugin": {"affinity": None, "nodeSelector": {"gpu": "yes"}}})
    pod = dropped.one("DaemonSet")["spec"]["template"]["spec"]
    assert "affinity" not in pod
    assert pod["nodeSelector"] == {"gpu": "yes"}
    term = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    # Lists are not merged: a list of terms of one's own replaces the default terms.
    replaced = render(helm, {"kubeletPlugin": {"affinity": affinity}})
    assert replaced.one("DaemonSet")["spec"]["template"]["spec"]["affinity"] == affinity


def test_kubelet_plugin_mounts_host_dirs_at_their_host_paths(
    rendered: Callable[[str], Rendered],
) -> None:
    """Registry, plugin, CDI and HAMi-core dirs are hostPaths mounted where the env says."""
    daemonset = rendered("defaults").one("DaemonSet", "gpushare-kubelet-plugin")
    env = env_of(containers(daemonset)[0])
    mounts = host_mounts(daemonset)
    for key in ("PLUGIN_REGISTRY_DIR", "PLUGIN_DIR", "CDI_ROOT"):
        assert mounts[env[key]] == (env[key], "DirectoryOrCreate"), key
    library_dir = str(Path(env["HAMI_CORE_LIBRARY"]).parent)
    assert mounts[library_dir] == (library_dir, "DirectoryOrCreate")
    assert set(mounts) == {
        env["PLUGIN_REGISTRY_DIR"],
        env["PLUGIN_DIR"],
        env["CDI_ROOT"],
        library_dir,
    }
    # Driver root / (driver on the host): NVML from the NVIDIA Container Toolkit.
    assert env["DRIVER_ROOT"] == "/"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    # compute too: libcuda and its companions, which the plugin mounts into containers.
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"


def test_kubelet_plugin_mounts_a_driver_root_and_its_runtime_class(
    rendered: Callable[[str], Rendered],
) -> None:
    """A driver root below / is mounted read-only at the same path; the toolkit is kept out."""
    daemonset = rendered("all-options").one("DaemonSet", "gpushare-kubelet-plugin")
    container = containers(daemonset)[0]
    env = env_of(container)
    assert env["DRIVER_ROOT"] == "/run/nvidia/driver"
    assert host_mounts(daemonset)["/run/nvidia/driver"] == ("/run/nvidia/driver", "Directory")
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/run/nvidia/driver"]
    assert mount["readOnly"] is True
    assert mount["mountPropagation"] == "HostToContainer"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "NVIDIA_DRIVER_CAPABILITIES" not in env
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["imagePullSecrets"] == [{"name": "registry"}]


def test_mps_backend_mounts_the_pipe_directory(rendered: Callable[[str], Rendered]) -> None:
    """backend=mps sets BACKEND and mounts the MPS pipe directory; hami-core does not."""
    mps = rendered("mps-backend").one("DaemonSet", "gpushare-kubelet-plugin")
    env = env_of(containers(mps)[0])
    assert env["BACKEND"] == "mps"
    assert host_mounts(mps)[env["MPS_PIPE_DIRECTORY"]][0] == "/run/nvidia/mps"
    default = rendered("defaults").one("DaemonSet", "gpushare-kubelet-plugin")
    assert "/run/nvidia/mps" not in host_mounts(default)


def test_hami_core_installer_copies_the_library_to_the_plugin_path(
    rendered: Callable[[str], Rendered],
) -> None:
    """The installer writes libraryPath's directory on the plugin's nodes, and only that."""
    r = rendered("all-options")
    installer = r.one("DaemonSet", "gpushare-hami-core-installer")
    plugin = r.one("DaemonSet", "gpushare-kubelet-plugin")
    pod, plugin_pod = installer["spec"]["template"]["spec"], plugin["spec"]["template"]["spec"]
    for key in ("affinity", "tolerations"):
        assert pod[key] == plugin_pod[key]
    (volume,) = pod["volumes"]
    assert volume["hostPath"] == {"path": "/usr/local/vgpu", "type": "DirectoryOrCreate"}
    (container,) = pod["containers"]
    script = container["args"][0]
    assert "target=/host-library/'libvgpu.so'" in script
    assert 'mv -f "$target.tmp.$$" "$target"' in script  # atomic replacement
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "privileged" not in container["securityContext"]
    assert rendered("defaults").names("DaemonSet") == ["gpushare-kubelet-plugin"]


def test_the_installer_copies_the_newest_versioned_library(
    rendered: Callable[[str], Rendered], tmp_path: Path
) -> None:
    """Run the rendered script: of libvgpu.so.v2.4.0 and .v2.8.2 in the image, 2.8.2 lands."""
    installer = rendered("all-options").one("DaemonSet", "gpushare-hami-core-installer")
    script = installer["spec"]["template"]["spec"]["containers"][0]["args"][0]
    image, host = tmp_path / "k8s-vgpu/lib/nvidia", tmp_path / "host-library"
    image.mkdir(parents=True)
    host.mkdir()
    for version in ("v2.4.0", "v2.8.2", "v2.10.0"):
        (image / f"libvgpu.so.{version}").write_text(version)
    # The copy, without the idling that keeps the DaemonSet's pod running.
    script = script.split("trap ", 1)[0]
    script = script.replace("/k8s-vgpu/lib/nvidia", str(image)).replace("/host-library", str(host))
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (host / "libvgpu.so").read_text() == "v2.10.0"  # version order, not text order
    assert [p.name for p in host.iterdir()] == ["libvgpu.so"]
    empty = script.replace(str(image), str(tmp_path / "nowhere"))
    failed = subprocess.run(["/bin/sh", "-c", empty], capture_output=True, text=True, check=False)
    assert failed.returncode == 1
    assert "nothing matches" in failed.stderr


def test_metrics_services_and_service_monitor_cover_every_component(
    rendered: Callable[[str], Rendered],
) -> None:
    """Headless metrics Services select each component; the ServiceMonitor scrapes both."""
    r = rendered("cert-manager")
    controller = r.one("Service", "gpushare-controller-metrics")
    plugin = r.one("Service", "gpushare-kubelet-plugin-metrics")
    for service, kind in ((controller, "Deployment"), (plugin, "DaemonSet")):
        assert service["spec"]["clusterIP"] == "None"
        template = r.one(kind)["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= template.items()
    assert {p["name"] for p in controller["spec"]["ports"]} == {"metrics", "webhook-metrics"}
    monitor = r.one("ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= controller["metadata"]["labels"].items()
    assert selector.items() <= plugin["metadata"]["labels"].items()
    endpoints = {e["port"]: e for e in monitor["spec"]["endpoints"]}
    assert endpoints["metrics"]["path"] == "/metrics"
    assert endpoints["webhook-metrics"]["scheme"] == "https"
    assert endpoints["webhook-metrics"]["tlsConfig"]["ca"]["secret"]["key"] == "ca.crt"
    assert rendered("defaults").of_kind("ServiceMonitor") == []


def test_values_file_names_every_documented_toggle() -> None:
    """The values the issue asks for exist: driver name, image, backend, installer, toggles."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["driverName"] == "gpushare.dra.dev"
    assert {"repository", "tag", "pullPolicy"} <= values["image"].keys()
    assert values["kubeletPlugin"]["backend"] == "hami-core"
    assert values["hamiCore"]["libraryPath"].endswith("/libvgpu.so")
    assert values["hamiCore"]["installer"]["enabled"] is False
    assert "pipeDirectory" in values["mps"]
    assert {"level", "format"} <= values["logging"].keys()
    assert values["webhook"]["enabled"] is True
    assert values["gate"]["enabled"] is True
    assert "resources" in values["controller"]
    assert "resources" in values["kubeletPlugin"]


@pytest.mark.parametrize(("kind", "name", "_"), WORKLOADS)
def test_a_stalled_component_is_restarted_through_livez(
    rendered: Callable[[str], Rendered], kind: str, name: str, _: str
) -> None:
    """Each workload's liveness probe reads /livez, where every watched loop is a check."""
    probe = component(rendered("defaults"), kind, name)["livenessProbe"]
    assert probe["httpGet"] == {"path": "/livez", "port": "metrics"}
    # Three failed probes 10 s apart: a stall is acted on within 30 s of being reported.
    assert probe["periodSeconds"] * probe["failureThreshold"] <= 30
