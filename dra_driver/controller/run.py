"""Run the controller as a process: signals, API client, probes and metrics."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final, Protocol

from prometheus_client import CollectorRegistry

from dra_driver.api import Backend, DriverNames
from dra_driver.controller.app import Controller
from dra_driver.controller.settings import ControllerSettings
from dra_driver.controller.view import ClusterView
from dra_driver.k8s.client import ClientConfigError, new_api_client
from dra_driver.k8s.heap import freeze_startup_heap
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.k8s.signals import stop_on_signals
from dra_driver.logging import bind, get_logger
from dra_driver.metrics import ObservabilityServer
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.metrics.watchdog import Watched, liveness_checks

log = get_logger(__name__)

EXIT_CONFIG: Final = 2
EXIT_LOST_LEADERSHIP: Final = 1


class Hosted(Protocol):
    """Something else the process serves beside the controller (the webhook)."""

    def loops(self) -> list[Watched]:
        """Return its loops, for the watchdog."""

    def stop(self) -> None:
        """Stop it."""


def run(
    names: DriverNames,
    settings: ControllerSettings,
    kube: KubeClientSettings,
    observability: ObservabilitySettings,
    stop: threading.Event | None = None,
    *,
    host: Callable[[ClusterView], Hosted] | None = None,
    default_backend: Backend = Backend.HAMI_CORE,
) -> int:
    """Run until SIGTERM/SIGINT (or ``stop``); return the exit status.

    ``host`` starts what else the process serves (the webhook), given the controller's
    informers before they start, so it can read them instead of watching the same objects
    again; it runs before the controller starts, its loops are watched too and it is stopped
    after the controller. What it raises ends the run before anything started.
    ``default_backend`` is the kubelet plugins' backend for claims whose config names none.
    """
    stop = stop or stop_on_signals()
    bind(driver=names.driver, component="controller")
    try:
        api_client = new_api_client(kube, "controller")
    except ClientConfigError as exc:
        log.error("controller.config", error=str(exc))  # noqa: TRY400 - the message says it all
        return EXIT_CONFIG
    registry = CollectorRegistry()
    try:
        controller = Controller(api_client, names, settings, registry, default_backend)
    except ValueError as exc:  # bad leader-election timings
        log.error("controller.config", error=str(exc))  # noqa: TRY400 - the message says it all
        api_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream
        return EXIT_CONFIG
    try:
        hosted = host(controller.view) if host is not None else None
    except BaseException:
        api_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream
        raise
    observer = None
    if observability.metrics_port >= 0:
        observer = ObservabilityServer(
            registry,
            component="controller",
            port=observability.metrics_port,
            readiness={
                "informers": lambda: None if controller.view.synced else "informers not synced",
            },
            liveness={
                "leadership": lambda: "lost leadership" if controller.lost.is_set() else None,
                **liveness_checks([*controller.loops(), *(hosted.loops() if hosted else [])]),
            },
        )
        observer.start()
    status = 0
    frozen = False
    try:
        controller.start()
        log.info("controller.started", leader_elect=settings.leader_elect)
        while not stop.wait(0.5):
            if controller.lost.is_set():
                status = EXIT_LOST_LEADERSHIP
                break
            if not frozen and controller.view.synced:
                # The informers now hold the cluster: from here a full collection walks only
                # what changed since, not every object of every client module and cache.
                frozen = True
                log.info("controller.synced", frozen_objects=freeze_startup_heap())
    finally:
        log.info("controller.stopping")
        controller.stop()
        if hosted is not None:
            hosted.stop()
        if observer is not None:
            observer.stop()
        api_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream
    return status
