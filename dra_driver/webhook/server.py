"""The HTTPS server kube-apiserver calls: ``POST /validate``, ``POST /mutate`` and probes.

Each accepted connection is wrapped with the certificate's *current* context, so a rotated
certificate is served from the next connection on without a restart; the TLS handshake runs on
the connection's own thread under a timeout, so a client that stalls it holds up no one else.
``/livez``, ``/readyz`` and ``/metrics`` are served here too: when the controller hosts the
webhook, this port is the only one that speaks for it. No request can stop the server: every
failure is answered (400, 404, 411, 413, 500, 501) or ends only its own connection.

Whoever reaches the port cannot hold it either: a connection may idle between requests for
the idle limit, but once a request's first byte arrives the whole request must arrive within
the request deadline, however slowly the bytes trickle in; and beyond the connection cap new
connections are closed at once instead of each taking a thread.
"""

from __future__ import annotations

import contextlib
import io
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, cast
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dra_driver.logging import carry, get_logger, pool_initializer
from dra_driver.webhook.admission import Admission, Outcome
from dra_driver.webhook.metrics import WebhookMetrics
from dra_driver.webhook.tls import ReloadingContext

log = get_logger(__name__)

# kube-apiserver sends at most 3 MiB of object per review (its own request limit), plus framing.
MAX_BODY_BYTES: Final = 3 * 1024 * 1024 + 64 * 1024
# Handshake and idle keep-alive limit per connection.
CONNECTION_TIMEOUT_SECONDS: Final = 30.0
# kube-apiserver sends a review at once; the webhook's own call timeout is at most 30 s.
REQUEST_DEADLINE_SECONDS: Final = 10.0
# Far more than the API servers' keep-alive pools need; each connection holds a thread.
MAX_CONNECTIONS: Final = 128
_TEXT: Final = "text/plain; charset=utf-8"

ReadinessCheck = Callable[[], str | None]
"""``None`` when ready, else why not."""


class _Deadlines:
    """Cuts the connections whose request has not arrived in time (one thread for all)."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._due: dict[socket.socket, float] = {}
        self._changed = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(
            target=carry(self._run), name="webhook-deadlines", daemon=True
        )

    def start(self) -> None:
        """Start cutting."""
        self._thread.start()

    def stop(self) -> None:
        """Stop cutting; the thread ends."""
        with self._changed:
            self._stopped = True
            self._changed.notify()
        if self._thread.is_alive():
            self._thread.join()

    @contextlib.contextmanager
    def reading(self, connection: socket.socket) -> Iterator[None]:
        """Hold ``connection`` to the deadline until :meth:`done` or the block ends."""
        with self._changed:
            self._due[connection] = time.monotonic() + self._seconds
            self._changed.notify()
        try:
            yield
        finally:
            self.done(connection)

    def done(self, connection: socket.socket) -> None:
        """Release ``connection`` from the deadline: its request has arrived, answering is free."""
        with self._changed:
            self._due.pop(connection, None)

    def _run(self) -> None:
        with self._changed:
            while not self._stopped:
                now = time.monotonic()
                for connection, due in list(self._due.items()):
                    if due <= now:
                        del self._due[connection]
                        _cut(connection)
                wait = min(self._due.values(), default=now + self._seconds) - now
                self._changed.wait(max(wait, 0.01))


def _cut(connection: socket.socket) -> None:
    """Shut the connection's socket, so its thread's blocked read ends (the thread closes it)."""
    log.info("webhook.request_too_slow", reason="the request did not arrive within the deadline")
    with contextlib.suppress(OSError):
        # The plain socket's shutdown: SSLSocket's would drop its TLS state under the reader.
        socket.socket.shutdown(connection, socket.SHUT_RDWR)


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 drops SYNs in a burst of API-server connections, and each
    # dropped one waits a second for the retransmit.
    request_queue_size = socket.SOMAXCONN
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        tls: ReloadingContext,
        webhook: WebhookServer,
        *,
        max_connections: int,
        request_deadline: float,
    ) -> None:
        self.tls = tls
        self.webhook = webhook
        self.deadlines = _Deadlines(request_deadline)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_connections = max_connections
        self._identity = pool_initializer()  # one thread per request: each starts bare
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:  # noqa: ANN401
        if not self._slots.acquire(blocking=False):
            log.warning(
                "webhook.connection_refused",
                reason=f"{self._max_connections} connections are open already",
                client=str(client_address),
            )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:  # noqa: ANN401
        self._identity()
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        connection, address = self.socket.accept()
        try:
            wrapped = self.tls.current().wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
        except OSError:
            connection.close()
            raise  # socketserver drops this connection and keeps accepting
        return wrapped, address

    def handle_error(self, request: object, client_address: object) -> None:  # noqa: ARG002
        if isinstance(sys.exc_info()[1], OSError):
            # A failed handshake, a reset or a timeout: that client's problem, logged quietly.
            log.debug("webhook.connection_failed", client=str(client_address), exc_info=True)
        else:
            log.exception("webhook.connection_crashed", client=str(client_address))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kube-apiserver keeps connections open between reviews
    timeout = CONNECTION_TIMEOUT_SECONDS
    # A response leaves in one write, flushed after each request: headers and body sent apart
    # are two TLS records, and with Nagle's algorithm the second waited for the API server's
    # delayed ACK, about 40 ms a review (a claim's two reviews took 96 ms instead of 5).
    wbufsize = 64 * 1024
    server: _TlsServer

    def setup(self) -> None:
        self.request.settimeout(self.timeout)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.do_handshake()
        super().setup()

    def handle_one_request(self) -> None:
        """Wait for the next request under the idle limit, then read it under the deadline."""
        try:
            # makefile("rb") is a BufferedReader; typeshed only knows it as BufferedIOBase.
            started = cast(io.BufferedReader, self.rfile).peek(1)
        except OSError:  # idle too long, or reset
            started = b""
        if not started:
            self.close_connection = True
            return
        with self.server.deadlines.reading(self.request):
            super().handle_one_request()

    def log_message(self, format: str, *args: object) -> None:
        log.debug("webhook.http", request=format % args)

    def reply(self, status: int, content_type: str, body: bytes) -> None:
        """Send a complete response."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def refuse(self, status: HTTPStatus, message: str) -> None:
        """Send an error and close: an unread body would garble the next request."""
        self.close_connection = True
        self.reply(status, _TEXT, f"{message}\n".encode())

    def do_GET(self) -> None:
        """Serve the probes and the metrics."""
        self.server.deadlines.done(self.request)
        self.server.webhook.get(self, urlsplit(self.path).path)

    def do_POST(self) -> None:
        """Answer a review."""
        self.server.webhook.post(self, urlsplit(self.path).path)


class WebhookServer:
    """Serves reviews over HTTPS on ``host:port``; ``port=0`` picks a free one."""

    def __init__(
        self,
        admission: Admission,
        tls: ReloadingContext,
        metrics: WebhookMetrics,
        registry: CollectorRegistry,
        *,
        ready: ReadinessCheck,
        host: str = "0.0.0.0",  # noqa: S104 - kube-apiserver calls from outside the pod
        port: int = 0,
        max_connections: int = MAX_CONNECTIONS,
        request_deadline: float = REQUEST_DEADLINE_SECONDS,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"webhook-max-connections must be 1 or more, not {max_connections}")
        if not request_deadline > 0:
            raise ValueError(f"webhook-request-timeout must be above 0, not {request_deadline}")
        self._routes = {"/validate": admission.validate, "/mutate": admission.mutate}
        self._metrics = metrics
        self._registry = registry
        self._ready = ready
        self._server = _TlsServer(
            (host, port),
            tls,
            self,
            max_connections=max_connections,
            request_deadline=request_deadline,
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve in a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(
            target=carry(self._server.serve_forever),
            kwargs={"poll_interval": 0.05},
            name="webhook-https",
            daemon=True,
        )
        self._thread.start()
        self._server.deadlines.start()
        log.info("webhook.serving", port=self.port)

    def stop(self) -> None:
        """Stop serving and release the port; safe to call more than once."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
            self._server.deadlines.stop()
        self._server.server_close()

    def get(self, handler: _Handler, path: str) -> None:
        """Answer ``/livez``, ``/readyz`` and ``/metrics``."""
        if path == "/metrics":
            handler.reply(HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(self._registry))
        elif path == "/livez":
            handler.reply(HTTPStatus.OK, _TEXT, b"ok\n")
        elif path == "/readyz":
            reason = _check(self._ready)
            if reason is None:
                handler.reply(HTTPStatus.OK, _TEXT, b"ok\n")
            else:
                handler.reply(
                    HTTPStatus.SERVICE_UNAVAILABLE, _TEXT, f"not ready: {reason}\n".encode()
                )
        else:
            handler.refuse(HTTPStatus.NOT_FOUND, "not found: serving /livez, /readyz, /metrics")

    def post(self, handler: _Handler, path: str) -> None:
        """Read a review's body within the limits and answer it."""
        route = self._routes.get(path)
        if route is None:
            handler.refuse(HTTPStatus.NOT_FOUND, "not found: POST /validate or /mutate")
            return
        operation = path.removeprefix("/")
        length_header = handler.headers.get("Content-Length")
        if length_header is None:
            self._refuse(handler, operation, HTTPStatus.LENGTH_REQUIRED, "Content-Length needed")
            return
        try:
            length = int(length_header)
        except ValueError:
            length = -1
        if length < 0:
            self._refuse(handler, operation, HTTPStatus.BAD_REQUEST, "bad Content-Length")
            return
        if length > MAX_BODY_BYTES:
            self._refuse(
                handler,
                operation,
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the body must be at most {MAX_BODY_BYTES} bytes",
            )
            return
        body = handler.rfile.read(length)
        self._server.deadlines.done(handler.request)
        if len(body) < length:
            handler.close_connection = True  # the client went away mid-body
            return
        started = time.perf_counter()
        try:
            outcome = route(body)
        except Exception:  # Admission answers its own failures; this is the last net
            log.exception("webhook.handler_failed", operation=operation)
            outcome = Outcome(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n", "", "error")
        self._metrics.observe(
            operation, outcome.kind, outcome.result, time.perf_counter() - started
        )
        handler.reply(outcome.status, outcome.content_type, outcome.body)

    def _refuse(self, handler: _Handler, operation: str, status: HTTPStatus, message: str) -> None:
        self._metrics.observe(operation, "", "malformed", 0.0)
        handler.refuse(status, message)


def _check(ready: ReadinessCheck) -> str | None:
    try:
        return ready()
    except Exception as exc:  # noqa: BLE001 - a crashing check is a failing check
        return f"check raised {type(exc).__name__}: {exc}"
