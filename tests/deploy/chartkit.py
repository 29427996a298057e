"""Render the Helm chart with the pinned helm, and look things up in what it rendered.

helm is the binary `hack/install-tools.sh` puts in `.tools/bin/` (or `$HELM`). Without it the
chart tests fail, naming the command that installs it: CI runs that script before pytest.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpushare-dra-driver"
EXAMPLES = ROOT / "deploy" / "examples"
INSTALL_TOOLS = ROOT / "hack" / "install-tools.sh"
TOOLS_BIN = ROOT / ".tools" / "bin"

RELEASE = "gpushare"
NAMESPACE = "gpushare"
DEFAULT_DRIVER = "gpushare.dra.dev"

# The Kubernetes releases the driver supports; every rendered object must validate in each.
KUBE_VERSIONS = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")

# The node labels the kubelet plugin's default affinity accepts, one ORed term each.
GPU_NODE_LABELS = (
    "nvidia.com/gpu.present",  # NVIDIA GPU feature discovery
    "feature.node.kubernetes.io/pci-10de.present",  # NFD, vendor only
    "feature.node.kubernetes.io/pci-0302_10de.present",  # NFD default: 3D controller, NVIDIA
    "feature.node.kubernetes.io/pci-0300_10de.present",  # NFD default: VGA controller, NVIDIA
)

# Custom-resource kinds kubernetes-validate has no schema for; only these are not validated.
CRD_KINDS = frozenset(
    {
        ("cert-manager.io/v1", "Issuer"),
        ("cert-manager.io/v1", "Certificate"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("gpushare.dra.dev/v1alpha1", "GpuShareQuota"),
    }
)

# The values matrix rendered (once each per session) and validated for every version.
MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "webhook-off": {"webhook": {"enabled": False}},
    "preemption-off": {"controller": {"preemption": {"enabled": False}}},
    "mps-backend": {"kubeletPlugin": {"backend": "mps"}},
    "custom-driver-name": {"driverName": "gpu.example.com"},
    "cert-manager": {
        "webhook": {"certManager": {"enabled": True}},
        "metrics": {"serviceMonitor": {"enabled": True}},
    },
    "monitoring": {
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
            "grafanaDashboard": {"enabled": True},
        },
    },
    "all-options": {
        "gate": {"enabled": False},
        "hamiCore": {"installer": {"enabled": True}},
        "kubeletPlugin": {"driverRoot": "/run/nvidia/driver", "runtimeClassName": "nvidia"},
        "controller": {"replicas": 1, "leaderElection": {"enabled": False}},
        "webhook": {
            "certManager": {"enabled": True, "issuerRef": {"kind": "ClusterIssuer", "name": "ca"}}
        },
        "metrics": {"serviceMonitor": {"enabled": True}},
        "imagePullSecrets": [{"name": "registry"}],
    },
    "operator-options": {
        "global": {"imageRegistry": "mirror.example.com"},
        "image": {"digest": "sha256:" + "ab" * 32},
        "controller": {
            "extraArgs": ["--log-level=debug"],
            "podSecurityContext": {"fsGroup": 10001},
            "serviceAccount": {"create": False, "name": "ops-controller"},
            "podDisruptionBudget": {"minAvailable": "50%"},
        },
        "kubeletPlugin": {
            "extraArgs": ["--log-level=debug"],
            "serviceAccount": {"annotations": {"example.com/owner": "gpu-team"}},
        },
        "webhook": {"tls": {"existingSecret": "webhook-cert", "injectCAFromSecret": True}},
        "cleanup": {"waitTimeout": 60, "activeDeadlineSeconds": 180},
    },
}


class HelmError(AssertionError):
    """helm exited non-zero; the message carries its stderr."""


def helm_binary() -> Path:
    """Return the helm to use, or fail the test saying how to install it."""
    configured = os.environ.get("HELM")
    helm = Path(configured) if configured else TOOLS_BIN / "helm"
    if not (helm.is_file() and os.access(helm, os.X_OK)):
        pytest.fail(
            f"helm not found at {helm}: run `bash hack/install-tools.sh` (hack/test.sh does) "
            "or point $HELM at a helm binary",
            pytrace=False,
        )
    return helm


def run_helm(helm: Path, *args: str, values: Mapping[str, Any] | None = None) -> str:
    """Run helm with ``args`` (and ``values`` as a values file); return stdout or raise."""
    argv = [str(helm), *args]
    stdin = None
    if values:
        argv += ["--values", "-"]
        stdin = json.dumps(values)  # JSON is YAML
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HelmError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def notes(helm: Path, values: Mapping[str, Any] | None = None) -> str:
    """Return the NOTES helm prints after `helm install` (client-side dry run: no cluster)."""
    out = run_helm(
        helm,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--dry-run=client",
        values=values,
    )
    return out.split("NOTES:\n", 1)[1]


_NOTES_PROBE = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: notes-probe}
data:
  notes: {{ tpl (.Files.Get "notes-copy.txt") . | b64enc | quote }}
"""


def notes_for(helm: Path, kube_version: str, work: Path) -> str:
    """Return NOTES as a cluster of ``kube_version`` would get them.

    `helm install --dry-run=client` cannot set the Kubernetes version, and `helm template`,
    which can, prints no NOTES: a copy of the chart renders them into a ConfigMap.
    """
    chart = work / "chart"
    shutil.copytree(CHART, chart)
    (chart / "notes-copy.txt").write_text((CHART / "templates/NOTES.txt").read_text())
    (chart / "templates/notes-probe.yaml").write_text(_NOTES_PROBE)
    out = run_helm(
        helm, "template", RELEASE, str(chart), "--namespace", NAMESPACE,
        "--kube-version", kube_version, "--show-only", "templates/notes-probe.yaml",
    )  # fmt: skip
    return base64.b64decode(yaml.safe_load(out)["data"]["notes"]).decode()


@dataclass(frozen=True)
class Rendered:
    """The objects of one `helm template`, and the text they came from."""

    text: str
    objects: tuple[dict[str, Any], ...] = field(default=())

    @classmethod
    def parse(cls, text: str) -> Rendered:
        docs = tuple(d for d in yaml.safe_load_all(text) if d)
        return cls(text, docs)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
        return found[0]

    def names(self, kind: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.of_kind(kind))


def render(
    helm: Path,
    values: Mapping[str, Any] | None = None,
    release: str = RELEASE,
    api_versions: Sequence[str] = (),
) -> Rendered:
    """Render the chart offline as `helm install <release> -n gpushare` would.

    ``api_versions``: what the cluster serves beyond helm's defaults (``.Capabilities``).
    """
    flags = [f"--api-versions={version}" for version in api_versions]
    return Rendered.parse(
        run_helm(
            helm, "template", release, str(CHART), "--namespace", NAMESPACE, *flags, values=values
        )
    )


def webhook(r: Rendered, kind: str, prefix: str = "") -> dict[str, Any]:
    """Return the configuration's webhook whose name starts with ``prefix``.

    The default is the one webhook of the validating configuration and the pod gate of the
    mutating one (which also holds ``capacity.<driver>``).
    """
    prefix = prefix or ("gate." if kind == "MutatingWebhookConfiguration" else "validate.")
    (hook,) = [h for h in r.one(kind)["webhooks"] if h["name"].startswith(prefix)]
    return dict(hook)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``override`` merged in, maps recursively, as Helm merges values."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def validate(obj: Mapping[str, Any], version: str) -> None:
    """Validate ``obj`` strictly for ``version``; raise kubernetes_validate.ValidationError.

    Identical objects recur across the values matrix; each is validated once per version.
    """
    _validate_json(json.dumps(obj, sort_keys=True), version)


@functools.cache
def _validate_json(doc: str, version: str) -> None:
    kubernetes_validate.validate(json.loads(doc), version, strict=True)


def containers(workload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the containers of a Deployment's or DaemonSet's pod template."""
    return list(workload["spec"]["template"]["spec"]["containers"])


def env_of(container: Mapping[str, Any]) -> dict[str, Any]:
    """Map env var name to its literal value, or to its ``valueFrom`` source."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def walk_strings(obj: object) -> Iterator[str]:
    """Every string (keys included) inside a parsed YAML object."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from walk_strings(key)
            yield from walk_strings(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from walk_strings(item)
