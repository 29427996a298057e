"""Settings of the kubelet plugin (``gpushare-dra kubelet-plugin``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.api import Backend
from dra_driver.publishing.slices import UNHEALTHY_TAINT_EFFECTS
from dra_driver.settings import InvalidSettingError, flag


@dataclasses.dataclass(frozen=True)
class KubeletPluginSettings:
    """Kubelet plugin (node side)."""

    node_name: str = flag("", "name of the Node this plugin serves (downward API spec.nodeName)")
    pod_uid: str = flag(
        "",
        "UID of this plugin's Pod; when set, socket names are per Pod so two plugin Pods can "
        "overlap in a rolling update (prepare calls are always serialised by a file lock)",
    )
    plugin_registry_dir: Path = flag(
        Path("/var/lib/kubelet/plugins_registry"),
        "directory the kubelet watches for plugin registration sockets",
    )
    plugin_dir: Path | None = flag(
        None,
        "this driver's directory for the DRA socket, checkpoint and per-claim state; "
        "default /var/lib/kubelet/plugins/<driver name>",
    )
    cdi_root: Path = flag(Path("/var/run/cdi"), "directory for the per-claim transient CDI specs")
    driver_root: Path = flag(
        Path("/"), "host root under which the NVIDIA driver's libraries and device nodes live"
    )
    gpu_inventory: Path | None = flag(
        None, "YAML description of fake cards to use instead of NVML (tests, simulation)"
    )
    backend: Backend = flag(
        Backend.HAMI_CORE, "interception backend for claims whose config does not choose one"
    )
    hami_core_library: Path = flag(
        Path("/usr/local/vgpu/libvgpu.so"), "host path of HAMi-core's libvgpu.so"
    )
    mps_pipe_directory: Path = flag(
        Path("/run/nvidia/mps"), "host directory of the NVIDIA MPS control daemon's pipes"
    )
    mps_shm_directory: Path = flag(
        Path("/run/nvidia/mps/shm"),
        "host directory of the NVIDIA MPS control daemon's shared memory; mounted at /dev/shm "
        "in containers of mps claims",
    )
    nvidia_cdi_hook: str = flag(
        "",
        "host path of the NVIDIA Container Toolkit's nvidia-cdi-hook (e.g. "
        "/usr/bin/nvidia-cdi-hook); when set, containers get an ld.so cache update for the "
        "driver libraries mounted into them",
    )
    device_status: bool = flag(
        True,
        "write each prepared claim's status.devices (the card's UUID and PCI bus ID, the "
        "share's cores, memory, isolation, priority and backend); needs the chart's RBAC for "
        "resourceclaims/status and, from Kubernetes 1.36, resourceclaims/driver",
    )
    unhealthy_taint_effect: str = flag(
        "NoSchedule",
        "effect of the taint <driver>/unhealthy on a card NVML reports unhealthy: NoSchedule "
        "keeps new claims off it, NoExecute also evicts the pods using it (where "
        "kube-controller-manager runs device taint eviction); on a cluster without "
        "DRADeviceTaints the card is left out of the slices instead",
    )
    monitor_period: float = flag(
        1.0,
        "seconds between two passes of the node monitor over the HAMi-core regions of the "
        "prepared claims: it suspends offline work while online work is busy on its card and "
        "lets a lone burst-share task use the idle card; 0 turns it off",
    )

    def __post_init__(self) -> None:
        if self.unhealthy_taint_effect not in UNHEALTHY_TAINT_EFFECTS:
            raise InvalidSettingError(
                "unhealthy_taint_effect",
                f"must be one of {', '.join(UNHEALTHY_TAINT_EFFECTS)}: "
                f"{self.unhealthy_taint_effect!r}",
            )
        if self.monitor_period < 0:
            raise InvalidSettingError(
                "monitor_period",
                f"must be 0 (off) or a positive number of seconds: {self.monitor_period}",
            )

    def resolved_plugin_dir(self, driver: str) -> Path:
        """Return the plugin directory, defaulting to the kubelet's convention for ``driver``."""
        return self.plugin_dir or Path("/var/lib/kubelet/plugins") / driver
