"""``gpushare-dra kubelet-plugin``: configuration checks and lifecycle of the node side.

Start: discover cards, publish the node's ResourceSlices, load and reconcile the checkpoint,
start the node monitor, serve the kubelet's sockets. Every few seconds cards are discovered
again, and slices and the health stream follow changes. SIGTERM or SIGINT: stop serving
(in-flight calls finish), release the HAMi-core regions, then stop publishing — slices stay, as
the kubelet removes a node's slices when a driver is gone.
"""

from __future__ import annotations

import threading
from typing import Final

from dra_driver.api import DriverNames
from dra_driver.k8s.client import ClientConfigError, new_api_client
from dra_driver.k8s.heap import freeze_startup_heap
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.k8s.signals import stop_on_signals
from dra_driver.kubeletplugin.assembly import build
from dra_driver.kubeletplugin.grpcserver import SocketPathError, socket_paths
from dra_driver.kubeletplugin.settings import KubeletPluginSettings
from dra_driver.logging import bind, get_logger
from dra_driver.metrics import ObservabilityServer
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.metrics.watchdog import liveness_checks
from dra_driver.nvml.fake import FakeCardSource
from dra_driver.nvml.real import NvmlCardSource
from dra_driver.nvml.source import CardSource, DiscoveryError

log = get_logger(__name__)

EXIT_CONFIG: Final = 2
EXIT_FAILED: Final = 1
_REDISCOVER_SECONDS: Final = 5.0


def run(
    names: DriverNames,
    settings: KubeletPluginSettings,
    kube: KubeClientSettings,
    observability: ObservabilitySettings,
    stop: threading.Event | None = None,
) -> int:
    """Run the plugin until SIGTERM/SIGINT (or ``stop``); return the exit status."""
    # First of all, so a SIGTERM during start-up still ends in an orderly stop.
    stop = stop or stop_on_signals()
    if not settings.node_name:
        log.error("plugin.config", error="--node-name / NODE_NAME is required")
        return EXIT_CONFIG
    bind(node=settings.node_name)
    plugin_dir = settings.resolved_plugin_dir(names.driver)
    try:
        sockets = socket_paths(
            settings.plugin_registry_dir, plugin_dir, names.driver, settings.pod_uid
        )
        api_client = new_api_client(kube, "kubelet-plugin")
    except (SocketPathError, ClientConfigError) as exc:
        log.error("plugin.config", error=str(exc))  # noqa: TRY400 - the message says it all
        return EXIT_CONFIG
    source: CardSource = (
        FakeCardSource(settings.gpu_inventory, settings.node_name)
        if settings.gpu_inventory is not None
        else NvmlCardSource(settings.driver_root)
    )
    try:
        source.start()
    except DiscoveryError as exc:
        log.error("plugin.no_cards", error=str(exc))  # noqa: TRY400 - the message says it all
        return EXIT_FAILED
    parts = build(names, settings, api_client, source, sockets)
    observer = None
    if observability.metrics_port >= 0:
        observer = ObservabilityServer(
            parts.registry,
            component="kubelet-plugin",
            status=lambda: f"sharing: {parts.sharing()}",
            port=observability.metrics_port,
            liveness=liveness_checks(parts.loops()),
            readiness=parts.readiness(),
        )
        observer.start()
    try:
        parts.start()
        log.info(
            "plugin.started",
            plugin_dir=str(plugin_dir),
            cdi_root=str(settings.cdi_root),
            frozen_objects=freeze_startup_heap(),
        )
        while not stop.wait(_REDISCOVER_SECONDS):
            parts.refresh()
    finally:
        log.info("plugin.stopping")
        parts.stop()
        source.stop()
        if observer is not None:
            observer.stop()
        api_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream
    return 0
