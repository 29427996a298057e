"""The serving certificate, read from files and reloaded when they change.

cert-manager (or any rotation) replaces the Secret's files while the webhook runs; the kubelet
swaps a projected volume's files through a symlink, so the files are compared by inode, size
and modification time, following links. Each new connection asks for :meth:`current`, which
looks at the files at most every ``check_interval`` seconds. A pair that does not load, such as
a new certificate next to the old key halfway through a rotation, is logged and the previous
context kept, and the files are tried again at the next check.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from dra_driver.logging import get_logger

log = get_logger(__name__)

CHECK_INTERVAL_SECONDS: Final = 5.0

_Stamp = tuple[tuple[int, int, int, int], ...]


class CertificateError(Exception):
    """The certificate and key files cannot be read or do not make a usable pair."""


def load_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """Return a TLS 1.2+ server context for the pair; raise :class:`CertificateError`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise CertificateError(
            f"cannot load TLS certificate {cert_file} with key {key_file}: {exc}"
        ) from exc
    return context


class ReloadingContext:
    """The current server ``SSLContext`` for a certificate and key file pair.

    Construction loads the pair and raises :class:`CertificateError` if it cannot: a webhook
    must not start without a certificate. ``on_reload`` hears ``"reloaded"`` or ``"failed"``.
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        check_interval: float = CHECK_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        on_reload: Callable[[str], None] | None = None,
    ) -> None:
        self._files = (cert_file, key_file)
        self._interval = check_interval
        self._clock = clock
        self._on_reload = on_reload or (lambda _: None)
        self._lock = threading.Lock()
        try:
            self._stamp = self._read_stamp()
        except OSError as exc:
            raise CertificateError(f"cannot read TLS certificate or key: {exc}") from exc
        self._context = load_context(cert_file, key_file)
        self._checked = clock()

    def _read_stamp(self) -> _Stamp:
        stats = (path.stat() for path in self._files)
        return tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)

    def current(self) -> ssl.SSLContext:
        """Return the context to serve the next connection with, reloading if files changed."""
        with self._lock:
            now = self._clock()
            if now - self._checked < self._interval:
                return self._context
            self._checked = now
            try:
                stamp = self._read_stamp()
                if stamp != self._stamp:
                    self._context = load_context(*self._files)
                    self._stamp = stamp
                    log.info("webhook.certificate_reloaded", cert_file=str(self._files[0]))
                    self._on_reload("reloaded")
            except (OSError, CertificateError) as exc:
                log.warning("webhook.certificate_reload_failed", error=str(exc))
                self._on_reload("failed")
            return self._context
