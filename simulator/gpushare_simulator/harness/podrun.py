"""Run a driver pod's container as a local process, the way the kubelet would start it.

The chart's pods (the controller, each node's kubelet plugin, the cleanup hook) exist in the
API, bound to nodes whose kubelet runs containers in a fake runtime; their real program runs
here instead, started from the pod as stored:

- the command is the image's entry point (``gpushare-dra``) with the container's ``args``;
- ``env`` as the kubelet resolves it (``valueFrom.fieldRef`` from the pod);
- volumes as the kubelet mounts them, rebased onto directories of this machine: a
  ``hostPath`` under the node's root directory, a ``secret`` written out from the Secret, an
  ``emptyDir`` a fresh directory. An env value inside a mount is rewritten to the local path,
  so the chart's paths (``/var/lib/kubelet/plugins_registry``…) meet the node's real kubelet;
- credentials as in-cluster config gives them: a ServiceAccount token bound to the pod (so
  the API server knows the pod's node, as it does for a real pod), in a kubeconfig.

What cannot be local is overridden by the caller (listening ports, the fake GPU inventory).
"""

from __future__ import annotations

import base64
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.objects import Object
from gpushare_simulator.harness.hollownode import KUBELET_DIR
from gpushare_simulator.harness.spawn import LoggedProcess

ENTRYPOINT: Final = "gpushare-dra"
"""The image's ENTRYPOINT (Dockerfile)."""
_TOKEN_SECONDS: Final = 3600


def _field(pod: Object, path: str) -> str:
    node: Any = pod
    for part in path.split("."):
        node = (node or {}).get(part)
    return "" if node is None else str(node)


def bound_token(api: client.ApiClient, pod: Object) -> str:
    """Return a token of the pod's ServiceAccount bound to the pod, as the kubelet mounts."""
    metadata = pod["metadata"]
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": _TOKEN_SECONDS,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
        },
    }
    account = pod["spec"].get("serviceAccountName") or "default"
    answer = raw.call(
        client.CoreV1Api(api).create_namespaced_service_account_token,
        account,
        metadata["namespace"],
        request,
    )
    token: str = answer["status"]["token"]
    return token


def token_kubeconfig(url: str, ca_file: Path, token: str) -> str:
    """Return a kubeconfig that authenticates with ``token``."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "c", "cluster": {"server": url, "certificate-authority": str(ca_file)}}
            ],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )


class PodProcess(LoggedProcess):
    """One container of one pod, running here; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        pod: Object,
        *,
        url: str,
        ca_file: Path,
        node_root: Path,
        kubelet_dir: Path,
        work_dir: Path,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.pod = pod
        self.work_dir = work_dir
        self._api = api
        self._node_root = node_root
        self._kubelet_dir = kubelet_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        container = pod["spec"]["containers"][0]
        mounts = self._mounts(container)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "LOG_"))}
        for variable in container.get("env") or []:
            env[variable["name"]] = self._value(variable, mounts)
        kubeconfig = work_dir / "kubeconfig"
        kubeconfig.write_text(token_kubeconfig(url, ca_file, bound_token(api, pod)))
        env["KUBECONFIG"] = str(kubeconfig)
        env.update(overrides or {})
        binary = Path(sys.executable).parent / ENTRYPOINT
        command = [str(binary if binary.exists() else shutil.which(ENTRYPOINT) or ENTRYPOINT)]
        command += list(container.get("command") or [])[1:] + list(container.get("args") or [])
        name = f"{pod['metadata']['namespace']}_{pod['metadata']['name']}"
        super().__init__(name, command, work_dir / "log", env)

    def _mounts(self, container: Object) -> dict[str, Path]:
        """Map each mount path of the container to its local directory, made ready."""
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes") or []}
        mounts = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "hostPath" in volume:
                local = self._host_path(volume["hostPath"]["path"])
            else:
                local = self.work_dir / "volumes" / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            if "secret" in volume:
                secret = raw.call(
                    client.CoreV1Api(self._api).read_namespaced_secret,
                    volume["secret"]["secretName"],
                    self.pod["metadata"]["namespace"],
                )
                for key, value in (secret.get("data") or {}).items():
                    (local / key).write_bytes(base64.b64decode(value))
            mounts[mount["mountPath"].rstrip("/")] = local
        return mounts

    def _host_path(self, path: str) -> Path:
        """Return where the node's ``path`` is here: the kubelet's own, or under the root."""
        inside = (
            Path(path).relative_to(KUBELET_DIR) if Path(path).is_relative_to(KUBELET_DIR) else None
        )
        if inside is not None:
            return self._kubelet_dir / inside
        return self._node_root / path.lstrip("/")

    def _value(self, variable: Object, mounts: dict[str, Path]) -> str:
        if "valueFrom" in variable:
            return _field(self.pod, variable["valueFrom"]["fieldRef"]["fieldPath"])
        value = str(variable.get("value", ""))
        for mount_path, local in sorted(mounts.items(), key=lambda m: -len(m[0])):
            if value == mount_path or value.startswith(mount_path + "/"):
                return str(local) + value[len(mount_path) :]
        return value

    def kill(self) -> None:
        """SIGKILL the process, as a node losing the pod would."""
        self.stop(0.0, kill=True)
