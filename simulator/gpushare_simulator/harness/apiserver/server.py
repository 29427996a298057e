"""HTTP/1.1 transport: a threading server that tracks its connections so it can stop cleanly.

Each connection gets a daemon thread; ``close()`` shuts every connection socket down (waking
handlers blocked on keep-alive reads and watch streams) and joins the threads, so a stopped
server leaves no thread, socket or port behind.

:meth:`ApiHTTPServer.blackhole` makes every connection open at that moment go silent, as a
partition or a load balancer that lost its state does: requests on it are swallowed (not
carried out), answers and watch events are never sent, and nothing is closed. Connections
opened afterwards work. A silenced connection is released once its client gives up on it.
"""

from __future__ import annotations

import contextlib
import http.server
import select
import socket
import threading
import time
import traceback
from typing import Final

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.app import LOG, ApiApp, Response
from gpushare_simulator.harness.apiserver.resources import REGISTRY
from gpushare_simulator.harness.apiserver.routing import RequestInfo, route
from gpushare_simulator.harness.apiserver.watch import WatchRequest, WatchStream

MAX_BODY: Final = 64 * 1024 * 1024
_SILENCE_POLL: Final = 0.1


class Handler(http.server.BaseHTTPRequestHandler):
    """One connection; every method funnels into :meth:`dispatch`."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: ApiHTTPServer
    silenced = False
    """This connection went silent (a hang fault, or black-holed): send nothing more."""

    def log_message(self, format: str, *args: object) -> None:
        """Route the access log to ``logging`` at debug level."""
        LOG.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        """Serve GET."""
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET  # noqa: N815

    def do_OPTIONS(self) -> None:
        """Answer 405 like the server."""
        self._read_body()
        self.send(Response.error(errors.method_not_allowed()))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise errors.ApiError(413, "RequestEntityTooLarge", "the request body is too large")
        return self.rfile.read(length) if length else b""

    def silence(self) -> None:
        """Say nothing more on this connection until the client closes it or the server stops."""
        self.silenced = True
        self.close_connection = True
        app = self.server.app
        while not app.stopping.wait(_SILENCE_POLL) and not self._client_gone():
            pass

    def send(self, response: Response) -> None:
        """Write a whole response in one send (status line, headers, body)."""
        if self.server.is_blackholed(self.connection):
            self.silence()  # the request got through before the partition, its answer does not
            return
        try:
            phrase = http.HTTPStatus(response.code).phrase
        except ValueError:  # a code only an admission webhook's denial could have chosen
            phrase = "Unknown"
        lines = [
            f"HTTP/1.1 {response.code} {phrase}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            "Cache-Control: no-cache, private",
            *(f"{name}: {value}" for name, value in response.headers),
        ]
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        self.wfile.write(head + (b"" if self.command == "HEAD" else response.body))
        self.log_request(response.code, len(response.body))

    def dispatch(self) -> None:
        """Route, count, apply faults, execute, answer."""
        app = self.server.app
        self.silenced = False
        try:
            raw = self._read_body()
            if self.server.is_blackholed(self.connection):
                self.silence()  # swallowed on its way: never carried out
                return
            info = route(REGISTRY, self.command, self.path)
        except errors.ApiError as exc:
            self.close_connection = exc.code == 413  # noqa: PLR2004 - the body was not read
            self.send(Response.error(exc))
            return
        agent = self.headers.get("User-Agent", "")
        self.server.note_agent(self.connection, agent)
        logged = app.count(info, agent) if info.verb != "discovery" else None
        if self._fault(info, after=False):
            return
        if info.verb == "watch":
            self._watch(info)
            return
        response = app.execute(info, raw, self.headers.get("Content-Type", ""))
        if self._fault(info, after=True):
            return
        if logged is not None:  # before it is sent: no client can act on it earlier
            logged.done = time.monotonic()
        self.send(response)

    def _fault(self, info: RequestInfo, *, after: bool) -> bool:
        agent = self.headers.get("User-Agent", "")
        fault = self.server.app.faults.pick(info, after=after, agent=agent)
        if fault is None:
            return False
        if fault.delay:
            self.server.app.stopping.wait(fault.delay)
        if fault.hang:
            if info.verb == "watch":
                self._start_watch_response()
            self.silence()
            return True
        if fault.drop:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if fault.status is None and not after:
            return False
        self.send(Response.error(fault.error(info)))
        return True

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            return True

    def _start_watch_response(self) -> None:
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nCache-Control: no-cache, private\r\n\r\n"
        )
        self.wfile.write(head.encode())

    def _watch(self, info: RequestInfo) -> None:
        assert info.rtype is not None  # noqa: S101 - routing guarantees it
        app = self.server.app
        try:
            request = WatchRequest.parse(info.rtype, info.namespace, info.query)
        except errors.ApiError as exc:
            self.send(Response.error(exc))
            return
        self._start_watch_response()

        def write(data: bytes) -> None:
            if self.server.is_blackholed(self.connection):
                self.silence()
                raise ConnectionAbortedError("black-holed")  # ends the stream, unannounced
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        stream = WatchStream(
            app.store, request, write, stopping=app.stopping,
            client_gone=self._client_gone, bookmark_interval=app.bookmark_interval,
        )  # fmt: skip
        try:
            stream.run()
        except Exception:
            app.internal_errors.append(f"watch {info.path}: {traceback.format_exc()}")
            raise
        if self.silenced:
            return
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        self.log_request(200)


class ApiHTTPServer(http.server.ThreadingHTTPServer):
    """A ThreadingHTTPServer whose connection threads can all be closed and joined."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    # socketserver's default backlog is 5: a burst of new connections while the accept loop
    # waits for the GIL overflows it, and the kernel then leaves clients waiting out SYN
    # retransmissions for up to a minute. A real API server listens with the system maximum.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], app: ApiApp) -> None:
        super().__init__(address, Handler)
        self.app = app
        self._connections: dict[threading.Thread, socket.socket] = {}
        self._blackholed: set[socket.socket] = set()
        self._agents: dict[socket.socket, str] = {}
        """The User-Agent of each connection's latest request."""
        self._connections_lock = threading.Lock()

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        """Serve a new connection on a tracked daemon thread."""
        thread = threading.Thread(
            target=self._serve, args=(request, client_address), daemon=True,
            name="fake-apiserver-connection",
        )  # fmt: skip
        sock = request if isinstance(request, socket.socket) else request[1]
        with self._connections_lock:
            self._connections[thread] = sock
        thread.start()

    def _serve(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        try:
            self.finish_request(request, client_address)
        except OSError:
            pass
        except Exception:  # noqa: BLE001 - report and keep serving other connections
            LOG.exception("fake API server connection failed")
        finally:
            self.shutdown_request(request)
            with self._connections_lock:
                sock = self._connections.pop(threading.current_thread(), None)
                if sock is not None:
                    self._blackholed.discard(sock)
                    self._agents.pop(sock, None)

    def note_agent(self, sock: socket.socket, agent: str) -> None:
        """Remember who sent the latest request on ``sock``."""
        with self._connections_lock:
            self._agents[sock] = agent

    def blackhole(self, agent: str = "") -> int:
        """Silence every connection open now (see the module docstring); return how many.

        With ``agent``, only connections whose latest request's User-Agent starts with it: a
        partition between one component and the API server.
        """
        with self._connections_lock:
            connections = {
                sock
                for sock in self._connections.values()
                if self._agents.get(sock, "").startswith(agent)
            }
            self._blackholed |= connections
        return len(connections)

    def is_blackholed(self, sock: socket.socket) -> bool:
        """Whether ``sock`` was open when the server was last told to black-hole."""
        with self._connections_lock:
            return sock in self._blackholed

    def close_connections(self, timeout: float = 5.0) -> None:
        """Shut every open connection down and join its thread."""
        with self._connections_lock:
            connections = list(self._connections.items())
        for _, sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread, _ in connections:
            thread.join(timeout)
