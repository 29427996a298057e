"""A tiny HTTPS admission webhook server for the fake API server's webhook tests.

Certificates come from the ``openssl`` command line (``cryptography`` is not a dependency): a CA,
and a server certificate it signs for ``localhost``, ``127.0.0.1`` and ``hook.webhooks.svc``.
"""

from __future__ import annotations

import base64
import http.server
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

JSON = dict[str, Any]
# A handler gets the AdmissionReview and returns the ``response`` stanza, or (status, raw body).
Handler = Callable[[JSON], Any]
SANS = "DNS:localhost,IP:127.0.0.1,DNS:hook.webhooks.svc"


@dataclass(frozen=True)
class Certs:
    ca_bundle: str  # base64 PEM of the CA, as clientConfig.caBundle wants it
    other_ca_bundle: str  # a CA that did not sign the server certificate
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.skip("the openssl command is needed to make the webhook server's certificate")
    subprocess.run([binary, *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", f"/CN={name}", "-days", "2", "-keyout", f"{name}.key", "-out", f"{name}.crt",
        cwd=directory,
    )  # fmt: skip


def make_certs(directory: Path) -> Certs:
    """Generate the CAs and the server certificate under ``directory``."""
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    (directory / "ext.cnf").write_text(
        f"subjectAltName={SANS}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=hook", "-keyout", "hook.key", "-out", "hook.csr", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "hook.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "hook.crt",
        cwd=directory,
    )  # fmt: skip

    def bundle(name: str) -> str:
        return base64.b64encode((directory / name).read_bytes()).decode()

    return Certs(
        bundle("ca.crt"), bundle("other-ca.crt"), directory / "hook.crt", directory / "hook.key"
    )


def allow(review: JSON, **extra: Any) -> JSON:
    """Return an allowing response to ``review``."""
    return {"uid": review["request"]["uid"], "allowed": True, **extra}


def patch(review: JSON, operations: list[JSON]) -> JSON:
    """Return an allowing response carrying a JSONPatch."""
    encoded = base64.b64encode(json.dumps(operations).encode()).decode()
    return allow(review, patch=encoded, patchType="JSONPatch")


def deny(review: JSON, status: JSON | None = None) -> JSON:
    """Return a denying response, with ``status`` if given."""
    answer: JSON = {"uid": review["request"]["uid"], "allowed": False}
    if status is not None:
        answer["status"] = status
    return answer


class HookServer:
    """HTTPS server answering AdmissionReviews by path; records every review it gets."""

    def __init__(self, certs: Certs) -> None:
        self.handlers: dict[str, Handler] = {}
        self.calls: list[tuple[str, JSON]] = []  # (request path with query, review)
        self.stop = threading.Event()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.cert, certs.key)
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.calls.append((self.path, review))
                handler = owner.handlers.get(self.path.split("?")[0], allow)
                answer = handler(review)
                if isinstance(answer, tuple):
                    code, body = answer
                else:
                    code = 200
                    body = json.dumps(
                        {"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                         "response": answer}
                    ).encode()  # fmt: skip
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def get_request(self) -> tuple[Any, Any]:
                sock, address = self.socket.accept()
                # The handshake runs on the connection's thread, not the accept loop.
                return context.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                ), address

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # refused handshakes and dropped clients are what some tests want

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        """Return the URL of ``path`` on this server."""
        return f"https://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        """Return the paths (without query) called so far, in order."""
        return [path.split("?")[0] for path, _ in self.calls]

    def reset(self) -> None:
        """Forget handlers and calls."""
        self.handlers.clear()
        self.calls.clear()

    def sleep(self, seconds: float) -> None:
        """Sleep in a handler, waking early when the server stops."""
        self.stop.wait(seconds)

    def close(self) -> None:
        """Stop serving and free the port."""
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
