"""Our own error hierarchy over the Kubernetes client's exceptions.

The rest of the driver never branches on HTTP status codes: it catches :class:`NotFoundError`,
:class:`ConflictError`, :class:`RetryableError` and so on. Both client flavours (sync and
``kubernetes.aio``) raise their own ``ApiException`` class, and transport failures surface as
urllib3, aiohttp or OS errors; :func:`from_exception` maps all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from typing import Final

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException as SyncApiException


class ApiError(Exception):
    """A request to the Kubernetes API failed.

    ``status`` is the HTTP status (``None`` for transport failures), ``reason`` the machine
    reason from the API server's ``Status`` object (``NotFound``, ``Conflict``, ...), and
    ``details`` its ``details`` field, which for ``Invalid`` lists the offending fields.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str | None = None,
        details: Mapping[str, object] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.details: Mapping[str, object] = details or {}
        self.retry_after = retry_after

    def __str__(self) -> str:
        prefix = f"{self.status} {self.reason}: " if self.status is not None else ""
        return f"{prefix}{self.message}"


class NotFoundError(ApiError):
    """The object (or the resource type) does not exist."""


class ConflictError(ApiError):
    """The write was based on a stale resourceVersion: re-read the object and try again."""


class AlreadyExistsError(ConflictError):
    """A create collided with an existing object of the same name."""


class GoneError(ApiError):
    """The requested resourceVersion is too old (compacted): list again, then watch."""


class InvalidError(ApiError):
    """The API server refused the object or request as malformed; retrying cannot help."""


class ForbiddenError(ApiError):
    """Authentication or RBAC refused the request; fix the credentials or the role."""


class RetryableError(ApiError):
    """A transient failure (throttling, server error, timeout, broken connection)."""


# Statuses where the same request may succeed later without any change on our side.
_RETRYABLE_STATUSES: Final = frozenset(
    {
        HTTPStatus.REQUEST_TIMEOUT,
        HTTPStatus.TOO_MANY_REQUESTS,
        HTTPStatus.INTERNAL_SERVER_ERROR,
        HTTPStatus.BAD_GATEWAY,
        HTTPStatus.SERVICE_UNAVAILABLE,
        HTTPStatus.GATEWAY_TIMEOUT,
    }
)

_ERRORS_BY_STATUS: Final[Mapping[int, type[ApiError]]] = {
    HTTPStatus.BAD_REQUEST: InvalidError,
    HTTPStatus.UNAUTHORIZED: ForbiddenError,
    HTTPStatus.FORBIDDEN: ForbiddenError,
    HTTPStatus.NOT_FOUND: NotFoundError,
    HTTPStatus.CONFLICT: ConflictError,
    HTTPStatus.GONE: GoneError,
    HTTPStatus.UNPROCESSABLE_ENTITY: InvalidError,
}


def _parse_status_body(body: object) -> tuple[str | None, str | None, Mapping[str, object]]:
    """Extract message, reason and details from a Kubernetes ``Status`` response body."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return None, None, {}
    try:
        status = json.loads(body)
    except ValueError:
        # Proxies and load balancers answer with HTML or plain text; keep it as the message.
        return body.strip()[:512] or None, None, {}
    if not isinstance(status, dict):
        return None, None, {}
    message = status.get("message")
    reason = status.get("reason")
    details = status.get("details")
    return (
        message if isinstance(message, str) else None,
        reason if isinstance(reason, str) else None,
        details if isinstance(details, dict) else {},
    )


def _retry_after(headers: object) -> float | None:
    if not isinstance(headers, Mapping):
        return None
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _from_status(status: int, http_reason: str | None, body: object, headers: object) -> ApiError:
    message, reason, details = _parse_status_body(body)
    reason = reason or http_reason
    message = message or http_reason or f"HTTP {status}"
    if status in _RETRYABLE_STATUSES:
        return RetryableError(
            message,
            status=status,
            reason=reason,
            details=details,
            retry_after=_retry_after(headers),
        )
    error_class = _ERRORS_BY_STATUS.get(status, ApiError)
    if error_class is ConflictError and reason == "AlreadyExists":
        error_class = AlreadyExistsError
    return error_class(message, status=status, reason=reason, details=details)


def from_exception(exc: BaseException) -> ApiError:
    """Map a failure of a Kubernetes client call to an :class:`ApiError`.

    An exception with an HTTP status is classified by status and the API server's ``Status``
    reason; one without (timeouts, refused or reset connections) is a :class:`RetryableError`.
    Callers normally use :func:`translate_errors`, which lets programming errors propagate
    unchanged instead of calling this on them.
    """
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason  # what the last attempt ran into
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        return _from_status(
            status,
            getattr(exc, "reason", None),
            getattr(exc, "body", None),
            getattr(exc, "headers", None),
        )
    if isinstance(exc, TimeoutError | asyncio.TimeoutError | urllib3.exceptions.TimeoutError):
        return RetryableError(f"request timed out: {exc}", reason="Timeout")
    return RetryableError(f"connection to the API server failed: {exc}", reason="ConnectionError")


def _async_failure_types() -> tuple[type[BaseException], ...]:
    """Failure types of the async client, if something loaded it.

    Not imported here: aiohttp and ``kubernetes.aio`` cost the privileged kubelet plugin,
    which never uses them, memory on every node. Their errors cannot exist unless loaded.
    """
    found: list[type[BaseException]] = []
    aio = sys.modules.get("kubernetes.aio.client.exceptions")
    if aio is not None:
        found.append(aio.ApiException)
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        found.append(aiohttp.ClientError)
    return tuple(found)


def _is_client_failure(exc: BaseException) -> bool:
    return isinstance(
        exc,
        (
            SyncApiException,
            urllib3.exceptions.HTTPError,
            TimeoutError,
            ConnectionError,
            *_async_failure_types(),
        ),
    )


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raise client and transport failures inside the block as :class:`ApiError`.

    Works around sync calls and around ``await`` expressions alike (it is a plain context
    manager; the exception is translated where it surfaces).
    """
    try:
        yield
    except ApiError:
        raise
    except Exception as exc:
        if not _is_client_failure(exc):
            raise
        raise from_exception(exc) from exc
