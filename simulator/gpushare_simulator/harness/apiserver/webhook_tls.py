"""TLS to admission webhooks as Go's ``crypto/tls`` and ``crypto/x509`` do it, with their messages.

The chain is checked by OpenSSL against ``caBundle`` (or the system roots); the host name is then
checked here against the certificate's SANs only (no Common Name fallback), as
``Certificate.VerifyHostname`` does, so that a mismatch reads like Go's ``HostnameError``.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import ipaddress
import socket
import ssl
from collections.abc import Mapping
from typing import Any, Final

JSON = dict[str, Any]
_VERIFY: Final = "tls: failed to verify certificate: "
# OpenSSL verify codes that mean "no trusted issuer": Go's UnknownAuthorityError.
_UNKNOWN_AUTHORITY: Final = frozenset({2, 18, 19, 20, 21, 27, 28})
_NOT_IN_VALIDITY: Final = frozenset({9, 10})


class HostnameError(Exception):
    """``x509.HostnameError``: the certificate does not name the host."""


class BundleError(Exception):
    """``caBundle`` does not hold PEM certificates."""


def context(config: JSON) -> ssl.SSLContext:
    """Return a client context trusting ``caBundle`` (base64 PEM) or else the system roots."""
    bundle = config.get("caBundle")
    if bundle:
        try:
            tls = ssl.create_default_context(cadata=base64.b64decode(str(bundle)).decode())
        except (binascii.Error, UnicodeDecodeError, ssl.SSLError) as exc:
            raise BundleError(f"unable to load root certificates: {exc}") from None
    else:
        tls = ssl.create_default_context()
    tls.check_hostname = False  # checked by check_host, against the SANs only, as Go does
    tls.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return tls


def is_ip(host: str) -> bool:
    """Whether ``host`` is an IP address literal."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _matches(pattern: str, host: str) -> bool:
    """Go's ``matchHostnames``: equal, or ``*`` as the leftmost label, case-insensitively."""
    want, got = pattern.lower().rstrip(".").split("."), host.lower().rstrip(".").split(".")
    if len(want) != len(got):
        return False
    return all(
        w == g or (i == 0 and w == "*") for i, (w, g) in enumerate(zip(want, got, strict=True))
    )


def check_host(cert: Mapping[str, Any], host: str) -> None:
    """``Certificate.VerifyHostname``; raise :class:`HostnameError` with Go's message."""
    sans = cert.get("subjectAltName") or ()
    names = [str(value) for kind, value in sans if kind == "DNS"]
    ips = [str(ipaddress.ip_address(str(v).strip())) for kind, v in sans if kind == "IP Address"]
    if is_ip(host):
        if str(ipaddress.ip_address(host)) in ips:
            return
        if not ips:
            detail = (
                f"cannot validate certificate for {host} because it doesn't contain any IP SANs"
            )
            raise HostnameError(f"x509: {detail}")
        valid = ", ".join(ips)
    else:
        if any(_matches(name, host) for name in names):
            return
        common = [v for rdn in cert.get("subject") or () for k, v in rdn if k == "commonName"]
        if not sans and common and _matches(str(common[0]), host):
            raise HostnameError(
                "x509: certificate relies on legacy Common Name field, use SANs instead"
            )
        valid = ", ".join(names)
    if not valid:
        detail = f"certificate is not valid for any names, but wanted to match {host}"
        raise HostnameError(f"x509: {detail}")
    raise HostnameError(f"x509: certificate is valid for {valid}, not {host}")


def go_error(exc: BaseException, host: str, port: int) -> str:
    """Word a transport failure as Go's ``net/http`` and ``crypto/tls`` would."""
    shown = f"[{host}]" if ":" in host else host
    simple: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
        (TimeoutError, "context deadline exceeded"),
        (ConnectionRefusedError, f"dial tcp {shown}:{port}: connect: connection refused"),
        (socket.gaierror, f"dial tcp: lookup {host}: no such host"),
        ((http.client.RemoteDisconnected, ConnectionResetError, EOFError), "EOF"),
        (HostnameError, f"{_VERIFY}{exc}"),
    )
    for kind, text in simple:
        if isinstance(exc, kind):
            return text
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code in _UNKNOWN_AUTHORITY:
            return _VERIFY + "x509: certificate signed by unknown authority"
        if exc.verify_code in _NOT_IN_VALIDITY:
            return _VERIFY + "x509: certificate has expired or is not yet valid"
        return f"{_VERIFY}x509: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError) and exc.reason == "WRONG_VERSION_NUMBER":
        return "http: server gave HTTP response to HTTPS client"
    return str(exc)
