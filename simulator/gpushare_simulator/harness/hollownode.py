"""A real kubelet per node: ``klhollow``, kubemark's hollow kubelet with the real DRA manager.

It is the kubelet's own code (pod workers, status manager, plugin watcher, the DRA manager)
over a fake container runtime. It registers its Node, finds kubelet plugins in
``<root>/plugins_registry``, calls NodePrepareResources before a pod's containers start and
NodeUnprepareResources after the pod is gone, streams device health, and records every
container it creates as ``<root>/containers/<namespace>_<pod>_<container>.json`` with the CDI
device IDs it handed the runtime. Containers "run" until their pod is deleted; nothing applies
CDI edits, so a container's environment is read from the CDI specs those IDs name.

Each node has two directories: ``kubelet_dir`` stands for its ``/var/lib/kubelet`` and
``root`` for the rest of its ``/``. A kubelet plugin started with the chart's paths rebased
onto them (see :mod:`gpushare_simulator.harness.podrun`) meets the kubelet where the chart
expects it. ``kubelet_dir`` must be short: a plugin's registration socket in it is named by
driver and pod UID, and a unix socket path holds at most 107 bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any, Final, cast

from kubernetes import client

from gpushare_simulator.harness._controlplane_setup import ControlPlaneError
from gpushare_simulator.harness.actors.cdiresolve import (
    ContainerEdits,
    UnresolvableCDIDevicesError,
    resolve,
)
from gpushare_simulator.harness.podstatus import patch_pod_status
from gpushare_simulator.harness.spawn import LoggedProcess

KUBELET_DIR: Final = "/var/lib/kubelet"
"""The kubelet's root directory on a node, which ``kubelet_dir`` stands for."""
_READY_TIMEOUT_S: Final = 60.0
_POLL_S: Final = 0.25


@dataclasses.dataclass(frozen=True)
class Container:
    """One container the kubelet created, with the CDI device IDs it was handed."""

    namespace: str
    pod: str
    pod_uid: str
    name: str
    attempt: int
    cdi_devices: tuple[str, ...]


_RECORD_READS: Final = 50
_RECORD_RETRY_S: Final = 0.01
_SCRATCH: Final = re.compile(
    r"Using (/tmp/hollow-kubelet\.[0-9]+) as root dir"
    r"|endpoint=\"unix://(/tmp/kubelet_remote_[0-9]+\.sock)\""
)
"""The two scratch paths a klhollow start logs; nothing else is ever removed."""


def _read_record(path: Path) -> dict[str, Any]:
    """Read one container record, waiting out the kubelet writing it.

    klhollow writes a record in place (truncate, then write), so a read can meet it empty or
    half written; the write ends within moments.
    """
    for _ in range(_RECORD_READS - 1):
        with contextlib.suppress(json.JSONDecodeError):
            return cast("dict[str, Any]", json.loads(path.read_text()))
        time.sleep(_RECORD_RETRY_S)
    return cast("dict[str, Any]", json.loads(path.read_text()))  # its error says what is wrong


class HollowNode:
    """One node's kubelet process; ``kubelet_dir`` and ``root`` are the node's directories."""

    def __init__(
        self,
        binary: Path,
        name: str,
        kubelet_dir: Path,
        root: Path,
        kubeconfig: Path,
        *,
        port: int,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.root = root
        self.kubelet_dir = kubelet_dir
        command = [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--name={name}",
            f"--root-dir={self.kubelet_dir}",
            f"--port={port}",
            f"--node-labels={','.join(f'{k}={v}' for k, v in (labels or {}).items())}",
            "--v=2",
        ]
        self.log_path = kubelet_dir / "kubelet.log"
        self._process = LoggedProcess(f"kubelet {name}", command, self.log_path)

    @property
    def registry(self) -> Path:
        """Where kubelet plugins register (the chart's /var/lib/kubelet/plugins_registry)."""
        return self.kubelet_dir / "plugins_registry"

    @property
    def plugins(self) -> Path:
        """Parent of the per-driver plugin directories (/var/lib/kubelet/plugins)."""
        return self.kubelet_dir / "plugins"

    @property
    def cdi_root(self) -> Path:
        """The node's /var/run/cdi, where the chart's plugin writes its CDI specs."""
        return self.root / "var" / "run" / "cdi"

    def start(self) -> None:
        """Start the kubelet; it registers its Node (see :meth:`wait_ready`)."""
        self.kubelet_dir.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        self._process.start()

    def wait_ready(self, api: client.ApiClient, timeout_s: float = _READY_TIMEOUT_S) -> None:
        """Wait until the Node reports Ready; ControlPlaneError with the log tail if not."""
        core = client.CoreV1Api(api)
        deadline = time.monotonic() + timeout_s
        while True:
            if not self._process.running():
                raise ControlPlaneError(f"the kubelet of {self.name} exited\n{self.tail()}")
            try:
                status = core.read_node(self.name).status
                conditions = (status.conditions if status else None) or []
                if any(c.type == "Ready" and c.status == "True" for c in conditions):
                    return
            except client.ApiException as exc:
                if exc.status != 404:  # noqa: PLR2004 - not registered yet is expected
                    raise
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"node {self.name} not Ready in {timeout_s:g} s\n{self.tail()}"
                )
            time.sleep(_POLL_S)

    def records(self) -> list[Container]:
        """Every container the kubelet created, as it recorded them, oldest first."""
        found = []
        for path in sorted((self.kubelet_dir / "containers").glob("*.json")):
            record = _read_record(path)
            found.append(
                Container(
                    namespace=record["namespace"],
                    pod=record["pod"],
                    pod_uid=record["podUID"],
                    name=record["container"],
                    attempt=int(record.get("attempt") or 0),
                    cdi_devices=tuple(record.get("cdiDevices") or ()),
                )
            )
        return found

    def container(self, namespace: str, pod: str, name: str) -> Container | None:
        """Return the recorded container, or None when the kubelet has not created it."""
        matches = [
            c for c in self.records() if (c.namespace, c.pod, c.name) == (namespace, pod, name)
        ]
        return matches[-1] if matches else None

    @property
    def containers(self) -> dict[tuple[str, str, str], ContainerEdits]:
        """What each container got from its CDI devices, by (namespace, pod, container).

        Read as a CDI runtime would, from the specs on the node. A container whose specs are
        gone (its claim was unprepared after its pod went) is not running and is left out.
        """
        found = {}
        for record in self.records():
            try:
                edits = resolve(record.cdi_devices, [self.cdi_root])
            except UnresolvableCDIDevicesError:
                continue
            found[(record.namespace, record.pod, record.name)] = edits
        return found

    def complete_pod(self, api: client.ApiClient, namespace: str, name: str) -> None:
        """Report the pod as Succeeded, as the kubelet would when its containers exit 0.

        The fake runtime's containers never exit on their own. The kubelet keeps a phase the
        API shows as terminal, then stops the pod and unprepares its claims as for any
        finished pod.
        """
        pod = {"metadata": {"namespace": namespace, "name": name}}
        patch_pod_status(client.CoreV1Api(api), pod, {"phase": "Succeeded"})

    def running(self) -> bool:
        """Whether the kubelet process is alive."""
        return self._process.running()

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the kubelet (SIGTERM, then SIGKILL), and remove its scratch files; repeatable."""
        self._process.stop(grace_s)
        for path in self.scratch():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def scratch(self) -> list[Path]:
        """Return what this kubelet made outside its directories, as its log names them.

        klhollow makes a directory and its fake runtime's socket under /tmp, at paths its
        (upstream kubemark) code fixes, and never removes them; each start logs both.
        """
        if not self.log_path.exists():
            return []
        text = self.log_path.read_text(errors="replace")
        return [Path(directory or socket) for directory, socket in _SCRATCH.findall(text)]

    def tail(self, lines: int = 25) -> str:
        """Return the last lines of the kubelet's log."""
        return self._process.tail(lines)
