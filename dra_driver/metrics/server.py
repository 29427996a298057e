"""A small HTTP server for ``/metrics``, ``/livez`` and ``/readyz``.

``prometheus_client.start_http_server`` answers the exposition on every path, so it cannot
double as a probe endpoint; this server routes explicitly and runs health checks by name.
The same checks are exported as ``gpushare_probe_check_ok``, so an alert can say which
check of which pod failed without scraping the probe endpoints.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dra_driver.logging import carry, get_logger

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

HealthCheck = Callable[[], str | None]
"""Returns ``None`` when healthy, else a short reason shown on the probe endpoint."""

_CONTENT_TYPE: Final = ("Content-Type", "text/plain; charset=utf-8")

log = get_logger(__name__)


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    # One slow scraper must never make a liveness probe time out.
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        log.debug("http.request", request=format % args)


def _run_checks(checks: Mapping[str, HealthCheck]) -> list[tuple[str, str | None]]:
    results: list[tuple[str, str | None]] = []
    for name, check in checks.items():
        try:
            results.append((name, check()))
        except Exception as exc:  # noqa: BLE001 - a crashing check is a failing check, not a crash
            results.append((name, f"check raised {type(exc).__name__}: {exc}"))
    return results


def _probe_body(results: Iterable[tuple[str, str | None]], verbose: bool) -> tuple[bool, bytes]:
    lines, healthy = [], True
    for name, reason in results:
        healthy = healthy and reason is None
        if verbose or reason is not None:
            lines.append(f"[+]{name} ok" if reason is None else f"[-]{name} failed: {reason}")
    lines.append("ok" if healthy else "not ok")
    return healthy, ("\n".join(lines) + "\n").encode()


class _ProbeCollector(Collector):
    """Each probe's checks at scrape time: 1 passing, 0 failing."""

    def __init__(self, component: str, probes: Mapping[str, Mapping[str, HealthCheck]]) -> None:
        self._component, self._probes = component, probes

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gpushare_probe_check_ok",
            "1 while a check of /livez or /readyz passes, 0 while it fails",
            labels=["component", "probe", "check"],
        )
        for probe, checks in self._probes.items():
            for name, reason in _run_checks(checks):
                family.add_metric([self._component, probe, name], 1 if reason is None else 0)
        yield family


class ObservabilityServer:
    """Serves Prometheus metrics and liveness/readiness probes on one port.

    ``port=0`` picks a free port (read it back from :attr:`port`). The probes follow the
    Kubernetes convention: status code decides, ``?verbose`` lists every check for humans.
    ``component`` labels the probe metric (``controller``, ``webhook``, ``kubelet-plugin``).
    ``status``, when given, returns a line about the component's state (the kubelet plugin's
    sharing mode) that opens every ``/readyz`` body; the status code stays the checks'.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        component: str,
        host: str = "0.0.0.0",  # noqa: S104 - probes and scrapes come from outside the Pod
        port: int = 0,
        liveness: Mapping[str, HealthCheck] | None = None,
        readiness: Mapping[str, HealthCheck] | None = None,
        status: Callable[[], str] | None = None,
    ) -> None:
        self._metrics_app = make_wsgi_app(registry)
        self._status = status
        self._liveness = dict(liveness or {})
        self._readiness = dict(readiness or {})
        probes = {"livez": self._liveness, "readyz": self._readiness}
        registry.register(_ProbeCollector(component, probes))
        self._server = make_server(
            host, port, self._app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self._server.server_address[1])

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            metrics: Iterable[bytes] = self._metrics_app(environ, start_response)
            return metrics
        checks = {"/livez": self._liveness, "/readyz": self._readiness}.get(path)
        if checks is None:
            # A fresh list each time: wsgiref appends Content-Length to the list it is given.
            start_response("404 Not Found", [_CONTENT_TYPE])
            return [b"not found: serving /metrics, /livez and /readyz\n"]
        verbose = "verbose" in environ.get("QUERY_STRING", "")
        healthy, body = _probe_body(_run_checks(checks), verbose)
        if path == "/readyz" and self._status is not None:
            body = f"{self._status()}\n".encode() + body
        start_response("200 OK" if healthy else "503 Service Unavailable", [_CONTENT_TYPE])
        return [body]

    def start(self) -> None:
        """Serve in a daemon thread until :meth:`stop`."""
        # A short poll interval keeps shutdown (SIGTERM, test teardown) prompt.
        self._thread = threading.Thread(
            target=carry(self._server.serve_forever),
            kwargs={"poll_interval": 0.05},
            name="observability-http",
            daemon=True,
        )
        self._thread.start()
        log.info("observability.started", port=self.port)

    def stop(self) -> None:
        """Stop serving and release the port; safe to call more than once."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
