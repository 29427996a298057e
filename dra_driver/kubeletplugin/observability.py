"""The plugin's ``/readyz`` also names its sharing mode: how the node's cards are published.

Whether the API server keeps consumable capacity decides how claims get their shares: by
their capacity requests, or, on plain devices, by their GpuShareConfig's cores and memory. A
node's ``/readyz`` says which, so nobody has to search the logs for it. Only the body gains a
line; the status code stays the checks' verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from dra_driver.metrics import HealthCheck, ObservabilityServer

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment


class PluginObservabilityServer(ObservabilityServer):
    """The shared metrics and probe server, its ``/readyz`` body opening with the sharing mode."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        sharing: Callable[[], str],
        host: str = "0.0.0.0",  # noqa: S104 - probes and scrapes come from outside the Pod
        port: int = 0,
        liveness: Mapping[str, HealthCheck] | None = None,
        readiness: Mapping[str, HealthCheck] | None = None,
    ) -> None:
        self._sharing = sharing
        super().__init__(
            registry,
            component="kubelet-plugin",
            host=host,
            port=port,
            liveness=liveness,
            readiness=readiness,
        )

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        body = super()._app(environ, start_response)
        if environ.get("PATH_INFO", "") != "/readyz":
            return body
        # One block: wsgiref then sends the Content-Length of the whole body.
        return [f"sharing: {self._sharing()}\n".encode() + b"".join(body)]
