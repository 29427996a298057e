"""``gpushare-dra kubelet-plugin``: wiring and lifecycle of the node side.

Start: discover cards, publish the node's ResourceSlices, load and reconcile the checkpoint,
serve the kubelet's sockets. Every few seconds cards are discovered again, and slices and the
health stream follow changes. SIGTERM or SIGINT: stop serving (in-flight calls finish), then
stop publishing — slices stay, as the kubelet removes a node's slices when a driver is gone.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Final

from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.api import DriverNames
from dra_driver.k8s import raw
from dra_driver.k8s.client import ClientConfigError, new_api_client
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.k8s.signals import stop_on_signals
from dra_driver.kubeletplugin.grpcserver import PluginServer, SocketPathError, socket_paths
from dra_driver.kubeletplugin.metrics import PluginMetrics
from dra_driver.kubeletplugin.publisher import SlicePublisher
from dra_driver.kubeletplugin.settings import KubeletPluginSettings
from dra_driver.kubeletplugin.state import ClaimPreparer, NodePaths
from dra_driver.logging import bind, get_logger
from dra_driver.metrics import ObservabilityServer
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.metrics.watchdog import (
    Heartbeat,
    Watched,
    liveness_checks,
    register_silence,
    stall_reason,
)
from dra_driver.nvml.fake import FakeCardSource
from dra_driver.nvml.inventory import Card, Health
from dra_driver.nvml.real import NvmlCardSource
from dra_driver.nvml.source import CardSource, DiscoveryError

log = get_logger(__name__)

EXIT_CONFIG: Final = 2
EXIT_FAILED: Final = 1
_REDISCOVER_SECONDS: Final = 5.0
_DISCOVERY_STALL_SECONDS: Final = 60.0
"""NVML answers in milliseconds; a discovery this long waits on a wedged driver or card."""


class _Cards:
    """The latest discovery, shared by the health stream, prepare and the slice publisher.

    Watched, too: a discovery that never returns (NVML can block on a card that fell off the
    bus) stalls the loop that keeps slices and health current, and fails ``/livez``.
    """

    name = "card-discovery"

    def __init__(
        self, source: CardSource, publisher: SlicePublisher, metrics: PluginMetrics
    ) -> None:
        self._source, self._publisher, self._metrics = source, publisher, metrics
        self._cards: tuple[Card, ...] = ()
        self._lock = threading.Lock()
        self._heartbeat = Heartbeat()

    def current(self) -> Sequence[Card]:
        with self._lock:
            return self._cards

    def silent_seconds(self) -> float:
        return self._heartbeat.read()[0]

    def stalled(self) -> str | None:
        silent, doing = self._heartbeat.read()
        if doing is None:
            return None  # between two discoveries
        return stall_reason(silent, _DISCOVERY_STALL_SECONDS, doing)

    def refresh(self) -> None:
        self._heartbeat.beat("discovering cards")
        try:
            self._discover()
        finally:
            self._heartbeat.beat()

    def _discover(self) -> None:
        try:
            discovery = self._source.discover()
        except DiscoveryError as exc:
            log.error("cards.discovery_failed", error=str(exc))  # noqa: TRY400 - message says it
            return
        for error in discovery.errors:
            log.warning(
                "cards.card_unreadable", index=error.index, uuid=error.uuid, error=error.message
            )
        with self._lock:
            changed = discovery.cards != self._cards
            self._cards = discovery.cards
        for health in Health:
            self._metrics.cards.labels(str(health)).set(
                sum(c.health is health for c in discovery.cards)
            )
        if changed:
            log.info("cards.changed", cards=len(discovery.cards))
            self._publisher.publish(discovery.cards)
        supported = self._publisher.consumable_capacity_supported
        if supported is not None:
            self._metrics.consumable_capacity.set(1 if supported else 0)


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
        registry_socket, dra_socket = socket_paths(
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
    metrics_registry = CollectorRegistry()
    metrics = PluginMetrics(metrics_registry)
    publisher = SlicePublisher(api_client, names, settings.node_name)
    cards = _Cards(source, publisher, metrics)
    resource = client.ResourceV1Api(api_client)
    preparer = ClaimPreparer(
        names,
        settings.node_name,
        NodePaths(
            plugin_dir=plugin_dir,
            cdi_root=settings.cdi_root,
            driver_root=settings.driver_root,
            hami_core_library=settings.hami_core_library,
            mps_pipe_directory=settings.mps_pipe_directory,
        ),
        get_claim=lambda namespace, name: raw.call(
            resource.read_namespaced_resource_claim, name, namespace
        ),
        cards=cards.current,
        default_backend=settings.backend,
    )
    server = PluginServer(
        driver=names.driver,
        node=settings.node_name,
        registry_socket=registry_socket,
        dra_socket=dra_socket,
        preparer=preparer,
        cards=cards.current,
        metrics=metrics,
    )
    loops: list[Watched] = [cards, *publisher.loops()]
    register_silence(metrics_registry, lambda: loops)
    observer = None
    if observability.metrics_port >= 0:
        observer = ObservabilityServer(
            metrics_registry,
            port=observability.metrics_port,
            liveness=liveness_checks(loops),
            readiness={
                "registered": lambda: (
                    None if server.registered.is_set() else "kubelet has not registered the plugin"
                ),
                "slices": lambda: (
                    None if publisher.wait_published(0) else "ResourceSlices not published yet"
                ),
            },
        )
        observer.start()
    try:
        publisher.start()
        cards.refresh()
        preparer.start()
        metrics.prepared_claims.set(len(preparer.prepared))
        server.start()
        log.info("plugin.started", plugin_dir=str(plugin_dir), cdi_root=str(settings.cdi_root))
        while not stop.wait(_REDISCOVER_SECONDS):
            cards.refresh()
    finally:
        log.info("plugin.stopping")
        server.stop()
        publisher.stop()
        source.stop()
        if observer is not None:
            observer.stop()
        api_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream
    return 0
