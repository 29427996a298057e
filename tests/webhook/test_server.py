"""The HTTPS server on 127.0.0.1: reviews, certificate rotation, bad input, probes, metrics."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from webhook.kit import (
    NAMES,
    FakeCluster,
    claim,
    claim_spec,
    from_template,
    pod,
    request,
    response,
    review,
    share_template,
    write_certificate,
)

from dra_driver.webhook import server as server_module
from dra_driver.webhook.admission import Admission
from dra_driver.webhook.metrics import WebhookMetrics
from dra_driver.webhook.server import MAX_BODY_BYTES, WebhookServer
from dra_driver.webhook.tls import ReloadingContext


@dataclass
class Served:
    server: WebhookServer
    directory: Path
    cert_file: Path
    key_file: Path
    der: bytes
    ready: threading.Event
    registry: CollectorRegistry

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    cert_file, key_file, der = write_certificate(tmp_path)
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    tls = ReloadingContext(
        cert_file, key_file, check_interval=0, on_reload=metrics.certificate_reload
    )
    cluster = FakeCluster(templates={("default", "share"): share_template()})
    ready = threading.Event()
    server = WebhookServer(
        Admission(NAMES, cluster),
        tls,
        metrics,
        registry,
        ready=lambda: None if ready.is_set() else "informers not synced",
        host="127.0.0.1",
    )
    server.start()
    try:
        yield Served(server, tmp_path, cert_file, key_file, der, ready, registry)
    finally:
        server.stop()


def _context(cafile: Path | None) -> ssl.SSLContext:
    if cafile is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=str(cafile))


def call(
    served: Served, method: str, path: str, body: bytes | None = None, *, verify: bool = False
) -> tuple[int, bytes, bytes]:
    """Make one request on a new connection; return status, body and the server's certificate."""
    context = _context(served.cert_file if verify else None)
    connection = http.client.HTTPSConnection("127.0.0.1", served.port, context=context, timeout=10)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        assert connection.sock is not None
        peer = connection.sock.getpeercert(binary_form=True)
        answer = connection.getresponse()
        return answer.status, answer.read(), peer or b""
    finally:
        connection.close()


def replace_file(source: Path, target: Path) -> None:
    """Swap a file in atomically, as the kubelet does for a Secret volume."""
    staged = target.with_suffix(".new")
    shutil.copyfile(source, staged)
    staged.replace(target)


def test_reviews_round_trip_over_verified_https(served: Served) -> None:
    """A client that verifies the certificate gets a denial from /validate, a patch from /mutate."""
    bad = claim(claim_spec(request(capacity={"cores": "150"})))
    status, body, _ = call(served, "POST", "/validate?timeout=5s", review(bad), verify=True)
    assert status == 200
    answer = response(body)
    assert answer["allowed"] is False
    assert answer["status"]["message"].startswith(
        'spec.devices.requests[0].exactly.capacity.requests[cores]: Invalid value: "150"'
    )
    status, body, _ = call(served, "POST", "/mutate", review(pod(from_template("share"))))
    assert status == 200
    assert response(body)["patchType"] == "JSONPatch"


def test_rotated_certificate_is_presented_on_the_next_connection(served: Served) -> None:
    """After the files change, the next connection gets the new certificate, no restart."""
    assert call(served, "GET", "/livez")[2] == served.der
    new_cert, new_key, new_der = write_certificate(served.directory, "rotated")
    replace_file(new_key, served.key_file)
    replace_file(new_cert, served.cert_file)
    status, _, presented = call(served, "GET", "/livez")
    assert (status, presented) == (200, new_der)
    assert (
        served.registry.get_sample_value(
            "gpushare_webhook_certificate_reloads_total", {"result": "reloaded"}
        )
        == 1
    )


def test_half_written_rotation_keeps_serving_the_old_certificate(served: Served) -> None:
    """A new certificate beside the old key fails to load; the old pair serves until the new key."""
    new_cert, new_key, new_der = write_certificate(served.directory, "rotated")
    replace_file(new_cert, served.cert_file)
    status, _, presented = call(served, "GET", "/livez")
    assert (status, presented) == (200, served.der)
    assert (
        served.registry.get_sample_value(
            "gpushare_webhook_certificate_reloads_total", {"result": "failed"}
        )
        == 1
    )
    replace_file(new_key, served.key_file)
    assert call(served, "GET", "/livez")[2] == new_der


def test_each_answer_leaves_in_one_write_with_nagle_off(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers and body leave in one write, TCP_NODELAY set: no delayed-ACK wait per review."""
    writes: list[tuple[int, int]] = []
    plain_send, plain_sendall = ssl.SSLSocket.send, ssl.SSLSocket.sendall

    def note(sock: ssl.SSLSocket, data: bytes) -> None:
        if sock.getsockname()[1] == served.port:  # the server's end of the connection
            writes.append((len(data), sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))

    def send(self: ssl.SSLSocket, data: bytes, flags: int = 0) -> int:
        note(self, data)
        return plain_send(self, data, flags)

    def sendall(self: ssl.SSLSocket, data: bytes, flags: int = 0) -> None:
        note(self, data)
        plain_sendall(self, data, flags)

    monkeypatch.setattr(ssl.SSLSocket, "send", send)
    monkeypatch.setattr(ssl.SSLSocket, "sendall", sendall)
    connection = http.client.HTTPSConnection(
        "127.0.0.1", served.port, context=_context(None), timeout=10
    )
    try:
        for _ in range(2):  # two reviews on one kept-alive connection, as kube-apiserver sends
            body = review(claim(claim_spec(request())))
            connection.request("POST", "/validate", body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            assert answer.status == 200
            assert response(answer.read())["allowed"] is True
    finally:
        connection.close()
    assert len(writes) == 2
    assert all(nodelay for _, nodelay in writes)


def test_garbage_body_gets_400_and_the_server_keeps_serving(served: Served) -> None:
    """An unreadable review is a 400 with the reason; the next review is answered normally."""
    status, body, _ = call(served, "POST", "/validate", b"\x00garbage")
    assert status == 400
    assert body.startswith(b"malformed AdmissionReview: the body is not JSON")
    status, body, _ = call(served, "POST", "/validate", review(claim(claim_spec(request()))))
    assert (status, response(body)["allowed"]) == (200, True)
    assert (
        served.registry.get_sample_value(
            "gpushare_webhook_requests_total",
            {"operation": "validate", "kind": "other", "result": "malformed"},
        )
        == 1
    )
    assert (
        served.registry.get_sample_value(
            "gpushare_webhook_requests_total",
            {"operation": "validate", "kind": "ResourceClaim", "result": "allowed"},
        )
        == 1
    )


def test_oversized_body_is_refused_unread(served: Served) -> None:
    """A Content-Length above the limit gets 413 before any of the body is read."""
    context = _context(None)
    with (
        socket.create_connection(("127.0.0.1", served.port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        tls.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode()
        )
        assert tls.recv(64).startswith(b"HTTP/1.1 413 ")
    assert call(served, "GET", "/livez")[0] == 200


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("POST", "/admit", 404), ("GET", "/validate", 404), ("PUT", "/validate", 501)],
)
def test_wrong_routes_are_answered_not_crashed(
    served: Served, method: str, path: str, status: int
) -> None:
    """Unknown paths and methods get their HTTP error; the server keeps running."""
    assert call(served, method, path, b"{}")[0] == status
    assert call(served, "GET", "/livez")[0] == 200


def test_a_failed_handshake_ends_only_that_connection(served: Served) -> None:
    """Plain HTTP on the TLS port breaks one handshake; HTTPS still works afterwards."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as raw:
        raw.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        raw.recv(64)
    assert call(served, "GET", "/livez")[0] == 200


def test_readyz_is_false_until_the_cache_is_synced(served: Served) -> None:
    """/readyz is 503 with the reason until the cache has listed, then 200."""
    assert call(served, "GET", "/readyz")[:2] == (503, b"not ready: informers not synced\n")
    served.ready.set()
    assert call(served, "GET", "/readyz")[:2] == (200, b"ok\n")


def test_metrics_are_served_on_the_webhook_port(served: Served) -> None:
    """/metrics exposes the review counter and latency histogram with their labels."""
    call(served, "POST", "/mutate", review(pod()))
    status, body, _ = call(served, "GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert (
        'gpushare_webhook_requests_total{kind="Pod",operation="mutate",result="allowed"} 1.0'
        in text
    )
    assert (
        'gpushare_webhook_request_duration_seconds_count{kind="Pod",operation="mutate"} 1.0' in text
    )


def test_review_with_a_partial_body_ends_the_connection_quietly(served: Served) -> None:
    """A client that sends less than its Content-Length and hangs up costs nothing else."""
    context = _context(None)
    with (
        socket.create_connection(("127.0.0.1", served.port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    status, body, _ = call(served, "POST", "/mutate", review(pod()))
    assert (status, json.loads(body)["response"]["allowed"]) == (200, True)


def test_the_listen_backlog_holds_a_burst_of_connections() -> None:
    """The server listens with the system's largest backlog, not http.server's 5."""
    assert server_module._TlsServer.request_queue_size == socket.SOMAXCONN
    assert socket.SOMAXCONN > 5


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[Served]:
    """Serve with a 2-connection cap and a 0.5 s request deadline."""
    cert_file, key_file, der = write_certificate(tmp_path)
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    tls = ReloadingContext(cert_file, key_file, check_interval=0)
    server = WebhookServer(
        Admission(NAMES, FakeCluster(templates={})),
        tls,
        metrics,
        registry,
        ready=lambda: None,
        host="127.0.0.1",
        max_connections=2,
        request_deadline=0.5,
    )
    server.start()
    try:
        yield Served(server, tmp_path, cert_file, key_file, der, threading.Event(), registry)
    finally:
        server.stop()


def _open(served: Served) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", served.port), timeout=5)
    return _context(None).wrap_socket(raw)


def _closed_by_server(connection: ssl.SSLSocket) -> bool:
    try:
        return connection.recv(1) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def test_a_request_trickling_in_is_cut_at_the_deadline(strict: Served) -> None:
    """A client sending a byte at a time is cut once the request deadline passes."""
    with _open(strict) as slow:
        started = time.monotonic()
        cut = False
        for byte in b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40:
            try:
                slow.sendall(bytes([byte]))
            except (ssl.SSLError, ConnectionError):
                cut = True
                break
            time.sleep(0.05)
        cut = cut or _closed_by_server(slow)
        assert cut
        assert time.monotonic() - started < 3
    assert call(strict, "GET", "/livez")[0] == 200


def test_an_idle_keep_alive_connection_is_not_cut_by_the_request_deadline(strict: Served) -> None:
    """The deadline counts from a request's first byte: idling between requests is allowed."""
    connection = http.client.HTTPSConnection(
        "127.0.0.1", strict.port, context=_context(None), timeout=5
    )
    try:
        connection.request("GET", "/livez")
        assert connection.getresponse().read() == b"ok\n"
        time.sleep(1.0)  # twice the deadline, far below the idle limit
        connection.request("GET", "/livez")
        assert connection.getresponse().read() == b"ok\n"
    finally:
        connection.close()


def test_connections_beyond_the_cap_are_closed_and_a_freed_slot_serves_again(
    strict: Served,
) -> None:
    """With the cap reached a new connection is closed at once; closing one frees its slot."""
    first, second = _open(strict), _open(strict)
    try:
        third = socket.create_connection(("127.0.0.1", strict.port), timeout=5)
        with third:
            # Closed without a handshake: a TLS client sees the connection end.
            assert third.recv(1) == b""
    finally:
        first.close()
    time.sleep(0.2)  # the server notices the close and frees the slot
    assert call(strict, "GET", "/livez")[0] == 200
    second.close()


def test_bad_limits_are_refused_naming_the_flag(tmp_path: Path) -> None:
    """A cap below 1 or a deadline of 0 is a configuration error naming its flag."""
    cert_file, key_file, _ = write_certificate(tmp_path)
    tls = ReloadingContext(cert_file, key_file, check_interval=0)
    registry = CollectorRegistry()
    admission = Admission(NAMES, FakeCluster(templates={}))
    with pytest.raises(ValueError, match="webhook-max-connections must be 1 or more, not 0"):
        WebhookServer(
            admission,
            tls,
            WebhookMetrics(registry),
            registry,
            ready=lambda: None,
            max_connections=0,
        )
    with pytest.raises(ValueError, match="webhook-request-timeout must be above 0, not 0"):
        WebhookServer(
            admission,
            tls,
            WebhookMetrics(CollectorRegistry()),
            registry,
            ready=lambda: None,
            request_deadline=0,
        )
