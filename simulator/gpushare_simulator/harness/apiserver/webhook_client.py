"""One HTTPS call to an admission webhook, failing the way kube-apiserver's webhook client does.

The request goes to ``clientConfig.url``, or for ``clientConfig.service`` to the address a test
mapped the service to (the harness has no cluster network); the URL in messages gets the
``?timeout=Ns`` the server's REST client appends. The certificate is verified against
``caBundle`` (or the system roots) and must name the URL host, or ``<service>.<namespace>.svc``,
in its SANs, as Go's ``crypto/x509`` requires. Every failure is a :class:`CallError` whose text is
the reason the server reports after ``failed calling webhook "<name>": ``. Transport failures read
as Go words them for refused connections, unknown hosts, timeouts (``context deadline
exceeded``) and certificate problems; rarer ones keep Python's wording.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from gpushare_simulator.harness.apiserver import webhook_tls

JSON = dict[str, Any]
MAX_MESSAGE: Final = 2048  # client-go's maxUnstructuredResponseTextBytes
_GENERIC: Final = {  # apimachinery's NewGenericServerResponse, by HTTP code
    400: "the server rejected our request for an unknown reason",
    401: "the server has asked for the client to provide credentials",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    409: "the server reported a conflict",
    422: "the server rejected our request due to an error in our request",
    429: "the server has received too many requests and has asked us to try again later",
    503: "the server is currently unable to handle the request",
    504: (
        "the server was unable to return a response in the time allotted, but may still be "
        "processing the request"
    ),
}


class CallError(Exception):
    """The webhook could not be called, or answered something unusable."""


@dataclass(frozen=True)
class Target:
    """Where a webhook is reached and how Go's messages name it."""

    shown: str  # the URL as the server's error messages quote it
    host: str
    port: int
    server_name: str  # the name the certificate must be valid for (and the SNI)
    path: str  # request target: path and ``?timeout=``
    host_header: str


@dataclass
class Answer:
    """The verified ``response`` stanza of an AdmissionReview."""

    allowed: bool
    status: JSON | None = None
    patch: bytes = b""
    patch_type: str = ""
    warnings: list[str] = field(default_factory=list)


def target(config: JSON, timeout: int, services: Mapping[tuple[str, str], str]) -> Target:
    """Resolve ``clientConfig``; an unmapped service fails like a service that does not exist."""
    query = f"?timeout={timeout}s"
    service = config.get("service")
    if not isinstance(service, dict):
        parts = urlsplit(str(config.get("url") or ""))
        path = parts.path or "/"
        host = parts.hostname or ""
        shown = f"https://{parts.netloc}{path}{query}"
        return Target(shown, host, parts.port or 443, host, path + query, parts.netloc)
    name, namespace = str(service.get("name")), str(service.get("namespace"))
    path = str(service.get("path") or "/")
    server_name = f"{name}.{namespace}.svc"
    netloc = f"{server_name}:{service.get('port', 443)}"
    shown = f"https://{netloc}{path}{query}"
    mapped = services.get((namespace, name))
    if mapped is None:
        raise CallError(f'failed to call webhook: Post "{shown}": service "{name}" not found')
    parts = urlsplit(mapped)
    return Target(shown, parts.hostname or "", parts.port or 443, server_name, path + query, netloc)


def post(config: JSON, body: bytes, timeout: int, services: Mapping[tuple[str, str], str]) -> JSON:
    """POST one AdmissionReview within ``timeout`` seconds; return the review answered."""
    where = target(config, timeout, services)
    try:
        context = webhook_tls.context(config)
    except webhook_tls.BundleError as exc:
        raise CallError(f"could not get REST client: {exc}") from None
    deadline = time.monotonic() + timeout
    sock: socket.socket | None = None
    try:
        sock = socket.create_connection((where.host, where.port), timeout=timeout)
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sni = None if webhook_tls.is_ip(where.server_name) else where.server_name
        sock = context.wrap_socket(sock, server_hostname=sni)
        webhook_tls.check_host(sock.getpeercert() or {}, where.server_name)
        connection = http.client.HTTPConnection(where.host, where.port)
        connection.sock = sock
        headers = {"Host": where.host_header, "Content-Type": "application/json"}
        connection.request("POST", where.path, body, headers | {"Accept": "application/json, */*"})
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        response = connection.getresponse()
        data = response.read()
    except (OSError, http.client.HTTPException, webhook_tls.HostnameError) as exc:
        detail = webhook_tls.go_error(exc, where.host, where.port)
        raise CallError(f'failed to call webhook: Post "{where.shown}": {detail}') from None
    finally:
        if sock is not None:
            sock.close()
    return _review(response.status, response.getheader("Content-Type") or "", data)


def _http_error(code: int, content_type: str, data: bytes) -> str:
    """client-go's error for a non-2xx answer: a Failure ``Status`` body, else a generic text."""
    try:
        status = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        status = None
    if (
        isinstance(status, dict)
        and status.get("kind") == "Status"
        and status.get("status") == "Failure"
    ):
        return str(status.get("message") or "")
    text = "unknown"
    if content_type.lower().startswith("text/"):
        text = data[:MAX_MESSAGE].decode(errors="replace").strip()
    if code in _GENERIC:
        return _GENERIC[code]
    if code in {403, 406, 415}:  # these keep the server's own message
        return text
    if code >= 500:  # noqa: PLR2004
        return (
            f"an error on the server ({json.dumps(text)}) has prevented the request from succeeding"
        )
    return f"the server responded with the status code {code} but did not return more information"


def _review(code: int, content_type: str, data: bytes) -> JSON:
    """Decode an HTTP answer into the AdmissionReview it carries (checked by :func:`verify`)."""
    if not 200 <= code <= 206:  # noqa: PLR2004 - what client-go counts as success
        raise CallError(f"failed to call webhook: {_http_error(code, content_type, data)}")
    if not data:
        raise CallError(
            "failed to call webhook: 0-length response with status code: "
            f"{code} and content type: {content_type}"
        )
    try:
        review = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        detail = f"couldn't get version/kind; json parse error: {exc}"
        raise CallError(f"failed to call webhook: {detail}") from None
    if not isinstance(review, dict) or not review.get("kind"):
        text = data.decode(errors="replace")
        raise CallError(f"failed to call webhook: Object 'Kind' is missing in '{text}'")
    return review


def verify(review: JSON, uid: str, version: str, *, mutating: bool) -> Answer:
    """Check the review's kind, uid and patch fields as ``VerifyAdmissionResponse`` does."""
    prefix = "received invalid webhook response: "
    expected = f"admission.k8s.io/{version}"
    got = (str(review.get("apiVersion") or ""), str(review.get("kind") or ""))
    if got != (expected, "AdmissionReview"):
        raise CallError(
            f"{prefix}expected webhook response of {expected}, Kind=AdmissionReview, "
            f"got {got[0]}, Kind={got[1]}"
        )
    response = review.get("response")
    if not isinstance(response, dict):
        raise CallError(prefix + "webhook response was absent")
    patch, patch_type = response.get("patch") or "", response.get("patchType")
    if version == "v1":
        if response.get("uid") != uid:
            got_uid = response.get("uid") or ""
            raise CallError(f'{prefix}expected response.uid="{uid}", got "{got_uid}"')
        _check_patch_fields(prefix, patch, patch_type, mutating=mutating)
    elif patch:  # v1beta1 never checked the type; the server pins it to JSONPatch
        patch_type = "JSONPatch"
    try:
        raw = base64.b64decode(str(patch), validate=True) if mutating else b""
    except binascii.Error as exc:
        raise CallError(f"failed to call webhook: illegal base64 data: {exc}") from None
    status = response.get("status")
    return Answer(
        allowed=response.get("allowed") is True,
        status=status if isinstance(status, dict) else None,
        patch=raw,
        patch_type=str(patch_type or ""),
        warnings=[str(w) for w in response.get("warnings") or []],
    )


def _check_patch_fields(prefix: str, patch: object, patch_type: object, *, mutating: bool) -> None:
    if mutating:
        if patch and patch_type is None:
            raise CallError(prefix + "webhook returned response.patch but not response.patchType")
        if not patch and patch_type is not None:
            raise CallError(prefix + "webhook returned response.patchType but not response.patch")
        if patch_type == "":
            raise CallError(f'{prefix}webhook returned invalid response.patchType of ""')
    elif patch:
        raise CallError(prefix + "validating webhook may not return response.patch")
    elif patch_type is not None:
        raise CallError(prefix + "validating webhook may not return response.patchType")
