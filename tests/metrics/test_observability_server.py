"""The observability server: metrics exposition and probes that follow Kubernetes conventions."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from dra_driver.metrics import HealthCheck, ObservabilityServer


def get(server: ObservabilityServer, path: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{server.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


class Flag:
    def __init__(self) -> None:
        self.reason: str | None = "informers not synced"

    def __call__(self) -> str | None:
        return self.reason


@pytest.fixture
def readiness() -> Flag:
    return Flag()


@pytest.fixture
def server(readiness: Flag) -> Iterator[ObservabilityServer]:
    registry = CollectorRegistry()
    Counter("gpushare_prepare_claims", "claims prepared", ["result"], registry=registry).labels(
        "success"
    ).inc(3)

    checks: dict[str, HealthCheck] = {"informers": readiness}
    srv = ObservabilityServer(
        registry,
        component="test",
        host="127.0.0.1",
        port=0,
        liveness={"ping": lambda: None},
        readiness=checks,
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_metrics_exposes_registered_series(server: ObservabilityServer) -> None:
    """/metrics returns the exposition of the registry the server was given."""
    status, body = get(server, "/metrics")
    assert status == 200
    assert 'gpushare_prepare_claims_total{result="success"} 3.0' in body


def test_livez_is_ok_while_checks_pass(server: ObservabilityServer) -> None:
    """/livez answers 200 ok when every liveness check passes."""
    assert get(server, "/livez") == (200, "ok\n")


def test_readyz_fails_until_the_check_passes(server: ObservabilityServer, readiness: Flag) -> None:
    """/readyz is 503 naming the failing check, then 200 once it passes."""
    assert get(server, "/readyz") == (503, "[-]informers failed: informers not synced\nnot ok\n")
    readiness.reason = None
    assert get(server, "/readyz") == (200, "ok\n")


def test_verbose_lists_every_check(server: ObservabilityServer, readiness: Flag) -> None:
    """?verbose lists passing checks too, as the API server's probes do."""
    readiness.reason = None
    assert get(server, "/readyz?verbose") == (200, "[+]informers ok\nok\n")


def test_a_crashing_check_fails_the_probe_instead_of_the_server() -> None:
    """A check that raises makes the probe 503 with the exception, and the server keeps serving."""

    def broken() -> str | None:
        raise RuntimeError("lease lookup exploded")

    srv = ObservabilityServer(
        CollectorRegistry(), component="test", host="127.0.0.1", readiness={"lease": broken}
    )
    srv.start()
    try:
        assert get(srv, "/readyz") == (
            503,
            "[-]lease failed: check raised RuntimeError: lease lookup exploded\nnot ok\n",
        )
        assert get(srv, "/livez")[0] == 200
    finally:
        srv.stop()


def test_unknown_path_is_404(server: ObservabilityServer) -> None:
    """Paths other than the three endpoints are 404, unlike prometheus_client's own server."""
    status, body = get(server, "/healthz")
    assert status == 404
    assert "/metrics, /livez and /readyz" in body


def test_stop_releases_the_port_and_is_idempotent() -> None:
    """After stop the port can be bound again, and a second stop is harmless."""
    srv = ObservabilityServer(CollectorRegistry(), component="test", host="127.0.0.1")
    srv.start()
    port = srv.port
    srv.stop()
    srv.stop()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))


def test_every_probe_check_is_a_metric_that_follows_it(
    server: ObservabilityServer, readiness: Flag
) -> None:
    """gpushare_probe_check_ok is 0 while a check fails and 1 once it passes, per probe."""
    _, body = get(server, "/metrics")
    assert 'gpushare_probe_check_ok{check="informers",component="test",probe="readyz"} 0.0' in body
    assert 'gpushare_probe_check_ok{check="ping",component="test",probe="livez"} 1.0' in body
    readiness.reason = None
    _, body = get(server, "/metrics")
    assert 'gpushare_probe_check_ok{check="informers",component="test",probe="readyz"} 1.0' in body
