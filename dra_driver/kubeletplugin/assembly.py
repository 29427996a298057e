"""The kubelet plugin's parts, built from its settings and started and stopped together.

Card discovery feeds the slice publisher, the prepare path and the health stream; the claim
preparer feeds the node monitor; all of them report to one metrics registry and are watched
by ``/livez``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.api import DriverNames
from dra_driver.k8s import raw
from dra_driver.k8s.objects import Object
from dra_driver.k8s.timestamps import rfc3339
from dra_driver.kubeletplugin.devicestatus import StatusReporter
from dra_driver.kubeletplugin.grpcserver import PluginServer
from dra_driver.kubeletplugin.metrics import PluginMetrics, ShareCollector
from dra_driver.kubeletplugin.monitor import RegionMonitor, monitored_claims
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.kubeletplugin.prerequisites import Prerequisites, backend_problem, driver_problem
from dra_driver.kubeletplugin.publisher import SlicePublisher
from dra_driver.kubeletplugin.settings import KubeletPluginSettings
from dra_driver.kubeletplugin.slicefeatures import sharing_mode
from dra_driver.kubeletplugin.state import ClaimPreparer
from dra_driver.logging import get_logger
from dra_driver.metrics.watchdog import Heartbeat, Watched, register_silence, stall_reason
from dra_driver.nvml.card import Card, Health
from dra_driver.nvml.driverfiles import DriverFiles, describe, find_driver_files
from dra_driver.nvml.source import CardSource, DiscoveryError

log = get_logger(__name__)

_DISCOVERY_STALL_SECONDS: Final = 60.0
"""NVML answers in milliseconds; a discovery this long waits on a wedged driver or card."""


class Cards:
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
        """Return the cards of the last discovery."""
        with self._lock:
            return self._cards

    def silent_seconds(self) -> float:
        """Seconds since a discovery started or ended."""
        return self._heartbeat.read()[0]

    def stalled(self) -> str | None:
        """Why discovery counts as stuck (one that never returns), or ``None``."""
        silent, doing = self._heartbeat.read()
        if doing is None:
            return None  # between two discoveries
        return stall_reason(silent, _DISCOVERY_STALL_SECONDS, doing)

    def refresh(self) -> None:
        """Discover the cards again; publish and report what changed."""
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


@dataclasses.dataclass
class PluginParts:
    """Everything the plugin runs; :func:`build` makes one."""

    settings: KubeletPluginSettings
    prerequisites: Prerequisites
    registry: CollectorRegistry
    metrics: PluginMetrics
    publisher: SlicePublisher
    cards: Cards
    preparer: ClaimPreparer
    monitor: RegionMonitor
    server: PluginServer
    status: StatusReporter | None

    @property
    def monitoring(self) -> bool:
        """Whether the node monitor runs (``--monitor-period`` above 0)."""
        return self.settings.monitor_period > 0

    def loops(self) -> list[Watched]:
        """Return what the watchdog looks after."""
        watched: list[Watched] = [self.cards, *self.publisher.loops()]
        if self.status is not None:
            watched.append(self.status.loop)
        return [*watched, self.monitor] if self.monitoring else watched

    def readiness(self) -> dict[str, Callable[[], str | None]]:
        """Return the ``/readyz`` checks."""
        return {
            "registered": lambda: (
                None if self.server.registered.is_set() else "kubelet has not registered the plugin"
            ),
            "slices": lambda: (
                None if self.publisher.wait_published(0) else "ResourceSlices not published yet"
            ),
            "prerequisites": self.prerequisites.not_ready,
        }

    def sharing(self) -> str:
        """Say how the cards are published, for ``/readyz``."""
        return sharing_mode(self.publisher.consumable_capacity_supported)

    def refresh(self) -> None:
        """Discover the cards again, and check the prerequisites if a minute has passed."""
        self.cards.refresh()
        self.prerequisites.refresh()

    def start(self) -> None:
        """Publish, reconcile the checkpoint, start the monitor, then serve the kubelet."""
        self.prerequisites.refresh(force=True)
        self.publisher.start()
        self.cards.refresh()
        if self.status is not None:
            self.status.start()
        self.preparer.start()
        self.metrics.prepared_claims.set(len(self.preparer.prepared))
        if self.monitoring:
            self.monitor.start()
        self.server.start()

    def stop(self) -> None:
        """Stop serving (in-flight calls finish), release the regions, stop publishing."""
        self.server.stop()
        self.monitor.stop()  # resumes what it suspended, enforces every limit again
        if self.status is not None:
            self.status.stop()
        self.publisher.stop()


def build(
    names: DriverNames,
    settings: KubeletPluginSettings,
    api_client: client.ApiClient,
    source: CardSource,
    sockets: tuple[Path, Path],
) -> PluginParts:
    """Wire the plugin's parts; nothing starts yet."""
    fake = settings.gpu_inventory is not None
    files = DriverFiles() if fake else find_driver_files(settings.driver_root, source.version())
    if files.files:
        log.info("plugin.driver_files", files=describe(files.files))
    registry = CollectorRegistry()
    metrics = PluginMetrics(registry)
    publisher = SlicePublisher(
        api_client,
        names,
        settings.node_name,
        on_capacity_change=metrics.set_consumable_capacity,
        unhealthy_effect=settings.unhealthy_taint_effect,
    )
    cards = Cards(source, publisher, metrics)
    resource = client.ResourceV1Api(api_client)
    paths = NodePaths(
        plugin_dir=settings.resolved_plugin_dir(names.driver),
        cdi_root=settings.cdi_root,
        driver_root=settings.driver_root,
        hami_core_library=settings.hami_core_library,
        mps_pipe_directory=settings.mps_pipe_directory,
        mps_shm_directory=settings.mps_shm_directory,
        driver_files=files,
        ldcache_hook=settings.nvidia_cdi_hook or None,
    )

    def check() -> list[str]:
        found = [
            backend_problem(
                settings.backend, settings.hami_core_library, settings.mps_pipe_directory
            ),
            None if fake else driver_problem(files, settings.driver_root),
        ]
        return [problem for problem in found if problem is not None]

    def get_claim(namespace: str, name: str) -> Object:
        return raw.call(resource.read_namespaced_resource_claim, name, namespace)

    status = None
    if settings.device_status:

        def patch_status(namespace: str, name: str, body: Object) -> Object:
            return raw.call(
                resource.patch_namespaced_resource_claim_status, name, namespace, body,
                _content_type=raw.MERGE_PATCH,
            )  # fmt: skip

        status = StatusReporter(
            names.driver, settings.node_name,
            get_claim=get_claim, patch_status=patch_status, now=rfc3339,
        )  # fmt: skip
    preparer = ClaimPreparer(
        names,
        settings.node_name,
        paths,
        get_claim=get_claim,
        cards=cards.current,
        default_backend=settings.backend,
        on_prepared=(
            None
            if status is None
            else lambda ref, statuses: status.report(ref.namespace, ref.name, ref.uid, statuses)
        ),
    )
    monitor = RegionMonitor(
        paths.hami_claims_dir,
        lambda: monitored_claims(preparer.prepared.values()),
        period=settings.monitor_period,
        running_pids=source.running_pids,
    )
    registry.register(ShareCollector(settings.node_name, monitor.usage, monitor.refused))
    server = PluginServer(
        driver=names.driver,
        node=settings.node_name,
        registry_socket=sockets[0],
        dra_socket=sockets[1],
        preparer=preparer,
        cards=cards.current,
        metrics=metrics,
    )
    parts = PluginParts(
        settings, Prerequisites(check), registry, metrics, publisher, cards, preparer, monitor,
        server, status,
    )  # fmt: skip
    register_silence(registry, parts.loops)
    return parts
