"""Settings of the kubelet plugin (``gpushare-dra kubelet-plugin``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.api import Backend
from dra_driver.settings import flag


@dataclasses.dataclass(frozen=True)
class KubeletPluginSettings:
    """Kubelet plugin (node side)."""

    node_name: str = flag("", "name of the Node this plugin serves (downward API spec.nodeName)")
    pod_uid: str = flag(
        "",
        "UID of this plugin's Pod; when set, socket names are per Pod and a file lock "
        "serialises prepare calls, so two plugin Pods can overlap in a rolling update",
    )
    kubelet_registrar_directory_path: Path = flag(
        Path("/var/lib/kubelet/plugins_registry"),
        "directory the kubelet watches for plugin registration sockets",
    )
    kubelet_plugins_directory_path: Path = flag(
        Path("/var/lib/kubelet/plugins"),
        "parent of this driver's plugin directory (<this>/<driver name>: DRA socket, checkpoint)",
    )
    cdi_root: Path = flag(Path("/var/run/cdi"), "directory for the per-claim transient CDI specs")
    driver_root: Path = flag(
        Path("/"), "host root under which the NVIDIA driver's libraries and device nodes live"
    )
    inventory_backend: str = flag(
        "nvml", "where cards are discovered: nvml (real), or fake", choices=("nvml", "fake")
    )
    fake_inventory: Path | None = flag(
        None, "YAML description of fake cards, read with --inventory-backend=fake"
    )
    default_backend: Backend = flag(
        Backend.HAMI_CORE, "interception backend for claims whose config does not choose one"
    )
    healthcheck_port: int = flag(51515, "TCP port of the gRPC liveness service; negative: off")
