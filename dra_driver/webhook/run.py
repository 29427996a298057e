"""``gpushare-dra webhook``, and the webhook as a part another process can host.

:func:`serve` starts the webhook beside whatever else a process runs (the controller hosts it
with ``--webhook-enabled``); :func:`run` is the whole process: signals, probes and metrics on
the observability port as well, until SIGTERM.
"""

from __future__ import annotations

import threading
from typing import Final

from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.api import DriverNames
from dra_driver.k8s.client import ClientConfigError, new_api_client
from dra_driver.k8s.heap import freeze_startup_heap
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.k8s.signals import stop_on_signals
from dra_driver.logging import bind, get_logger
from dra_driver.metrics import ObservabilityServer
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.metrics.watchdog import Watched, liveness_checks, register_silence
from dra_driver.webhook.admission import Admission
from dra_driver.webhook.cache import Borrowed, ClusterCache
from dra_driver.webhook.metrics import WebhookMetrics
from dra_driver.webhook.server import WebhookServer
from dra_driver.webhook.settings import WebhookSettings
from dra_driver.webhook.tls import CertificateError, ReloadingContext

log = get_logger(__name__)

EXIT_CONFIG: Final = 2


class WebhookConfigError(Exception):
    """The webhook cannot start: no credentials, no usable certificate, or the port is taken."""


class Webhook:
    """The cache, the HTTPS server and the metrics of one webhook; it owns ``api_client``.

    ``borrowed``: informers of the hosting process that the cache reads instead of its own.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        names: DriverNames,
        settings: WebhookSettings,
        registry: CollectorRegistry,
        *,
        borrowed: Borrowed | None = None,
    ) -> None:
        self._api_client = api_client
        metrics = WebhookMetrics(registry)
        try:
            tls = ReloadingContext(
                settings.tls_cert_file,
                settings.tls_key_file,
                on_reload=metrics.certificate_reload,
            )
            self.cache = ClusterCache(api_client, names, borrowed=borrowed)
            self.server = WebhookServer(
                Admission(
                    names, self.cache, settings.backend, label_templates=settings.policy_gate
                ),
                tls,
                metrics,
                registry,
                ready=self.not_ready,
                port=settings.webhook_port,
                max_connections=settings.webhook_max_connections,
                request_deadline=settings.webhook_request_timeout,
            )
        except (CertificateError, OSError, ValueError) as exc:
            raise WebhookConfigError(str(exc)) from exc

    def loops(self) -> list[Watched]:
        """Return what a watchdog looks after: the cache's own informers (not borrowed ones)."""
        return list(self.cache.informers)

    def not_ready(self) -> str | None:
        """Return why reviews cannot be decided yet, or ``None``."""
        return None if self.cache.synced else "informers not synced"

    def start(self) -> None:
        """Start the informers and serve."""
        self.cache.start()
        self.server.start()

    def stop(self) -> None:
        """Stop serving, stop the informers and close the API client."""
        self.server.stop()
        self.cache.stop()
        self._api_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream


def serve(
    names: DriverNames,
    settings: WebhookSettings,
    kube: KubeClientSettings,
    registry: CollectorRegistry | None = None,
    *,
    borrowed: Borrowed | None = None,
) -> Webhook:
    """Start a webhook with its own API client; raise :class:`WebhookConfigError`.

    Its metrics go to ``registry`` (a fresh one if none is given) and are served on the
    webhook's own port as well. ``borrowed``: the hosting process's informers to read.
    """
    try:
        # No client-side retries: a live read on a cache miss must fit in the API server's
        # webhook timeout; the informers retry on their own.
        api_client = new_api_client(kube, "webhook", retries=False)
    except ClientConfigError as exc:
        raise WebhookConfigError(str(exc)) from exc
    try:
        webhook = Webhook(
            api_client, names, settings, registry or CollectorRegistry(), borrowed=borrowed
        )
    except WebhookConfigError:
        api_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream
        raise
    webhook.start()
    log.info("webhook.started", port=webhook.server.port)
    return webhook


def run(
    names: DriverNames,
    settings: WebhookSettings,
    kube: KubeClientSettings,
    observability: ObservabilitySettings,
    stop: threading.Event | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (or ``stop``); return the exit status."""
    stop = stop or stop_on_signals()
    bind(driver=names.driver, component="webhook")
    registry = CollectorRegistry()
    try:
        webhook = serve(names, settings, kube, registry)
    except WebhookConfigError as exc:
        log.error("webhook.config", error=str(exc))  # noqa: TRY400 - the message says it all
        return EXIT_CONFIG
    observer = None
    try:
        if observability.metrics_port >= 0:
            register_silence(registry, webhook.loops)
            observer = ObservabilityServer(
                registry,
                component="webhook",
                port=observability.metrics_port,
                liveness=liveness_checks(webhook.loops()),
                readiness={"informers": webhook.not_ready},
            )
            observer.start()
        frozen = False
        # A short wait keeps the main thread responsive to signals.
        while not stop.wait(0.5):
            if not frozen and webhook.cache.synced:
                # As the controller does: full collections walk only what came after start-up.
                frozen = True
                log.info("webhook.synced", frozen_objects=freeze_startup_heap())
    finally:
        log.info("webhook.stopping")
        webhook.stop()
        if observer is not None:
            observer.stop()
    return 0
