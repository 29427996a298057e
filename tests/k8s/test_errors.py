"""The API error hierarchy: every client failure maps to one class with the server's words."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import aiohttp
import pytest
import urllib3.exceptions
from kubernetes import client
from kubernetes.aio.client.exceptions import ApiException as AioApiException
from kubernetes.client.exceptions import ApiException

from dra_driver.k8s.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    NotFoundError,
    RetryableError,
    from_exception,
    translate_errors,
)


def status_body(code: int, reason: str, message: str, **details: object) -> str:
    body: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    if details:
        body["details"] = details
    return json.dumps(body)


CASES = [
    (404, "NotFound", 'resourceclaims "c1" not found', NotFoundError),
    (409, "Conflict", "the object has been modified", ConflictError),
    (409, "AlreadyExists", 'resourceclaims "c1" already exists', AlreadyExistsError),
    (410, "Expired", "too old resource version: 5 (20)", GoneError),
    (422, "Invalid", "ResourceSlice is invalid", InvalidError),
    (400, "BadRequest", "json: cannot unmarshal", InvalidError),
    (401, "Unauthorized", "Unauthorized", ForbiddenError),
    (403, "Forbidden", "cannot patch resource resourceclaims/status", ForbiddenError),
    (429, "TooManyRequests", "too many requests", RetryableError),
    (500, "InternalError", "etcdserver: request timed out", RetryableError),
    (503, "ServiceUnavailable", "apiserver is shutting down", RetryableError),
    (504, "Timeout", "the server was unable to respond in time", RetryableError),
    (405, "MethodNotAllowed", "the server does not allow this method", ApiError),
]


class TestFromException:
    @pytest.mark.parametrize(("status", "reason", "message", "expected"), CASES)
    def test_status_maps_to_class_and_keeps_server_words(
        self, status: int, reason: str, message: str, expected: type[ApiError]
    ) -> None:
        """Each HTTP status and Status reason maps to its class with message and reason."""
        exc = ApiException(
            status=status, reason="ignored", body=status_body(status, reason, message)
        )
        error = from_exception(exc)
        assert type(error) is expected
        assert (error.status, error.reason, error.message) == (status, reason, message)
        assert str(error) == f"{status} {reason}: {message}"

    def test_only_already_exists_is_already_exists(self) -> None:
        """AlreadyExists is a ConflictError subclass, but a plain Conflict is not AlreadyExists."""
        conflict = from_exception(ApiException(status=409, body=status_body(409, "Conflict", "x")))
        exists = from_exception(
            ApiException(status=409, body=status_body(409, "AlreadyExists", "x"))
        )
        assert isinstance(exists, ConflictError)
        assert not isinstance(conflict, AlreadyExistsError)

    def test_invalid_keeps_field_causes(self) -> None:
        """The details of an Invalid status (the offending fields) survive the mapping."""
        causes = [{"field": "spec.devices[0].name", "message": "Invalid value"}]
        body = status_body(422, "Invalid", "invalid", causes=causes)
        error = from_exception(ApiException(status=422, body=body))
        assert error.details == {"causes": causes}

    def test_retry_after_header_is_read(self) -> None:
        """A 429 carries the server's Retry-After so callers can back off as told."""
        exc = ApiException(status=429, body=status_body(429, "TooManyRequests", "slow down"))
        exc.headers = {"Retry-After": "3"}
        error = from_exception(exc)
        assert isinstance(error, RetryableError)
        assert error.retry_after == 3.0

    def test_non_json_body_becomes_the_message(self) -> None:
        """A proxy's plain-text answer is kept as the message instead of being lost."""
        exc = ApiException(status=502, reason="Bad Gateway", body="upstream connect error\n")
        error = from_exception(exc)
        assert isinstance(error, RetryableError)
        assert (error.reason, error.message) == ("Bad Gateway", "upstream connect error")

    def test_aio_client_exceptions_map_the_same(self) -> None:
        """The kubernetes.aio exception class is mapped exactly like the sync one."""
        exc = AioApiException(
            status=404, reason="Not Found", body=status_body(404, "NotFound", "gone")
        )
        error = from_exception(exc)
        assert isinstance(error, NotFoundError)
        assert error.message == "gone"

    def test_empty_body_falls_back_to_http_reason(self) -> None:
        """Without a Status body the HTTP reason phrase is the message."""
        error = from_exception(ApiException(status=404, reason="Not Found"))
        assert isinstance(error, NotFoundError)
        assert error.message == "Not Found"


class TestTranslateErrors:
    def test_client_exception_is_reraised_as_api_error_with_cause(self) -> None:
        """Inside the block a client ApiException surfaces as our class, chained to the original."""
        original = ApiException(status=404, body=status_body(404, "NotFound", "no such claim"))
        with pytest.raises(NotFoundError, match="no such claim") as caught, translate_errors():
            raise original
        assert caught.value.__cause__ is original

    @pytest.mark.parametrize(
        ("exc", "reason"),
        [
            (
                urllib3.exceptions.MaxRetryError(None, "/api", "connection refused"),
                "ConnectionError",
            ),
            (urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out"), "Timeout"),
            (TimeoutError("deadline"), "Timeout"),
            (ConnectionResetError("reset by peer"), "ConnectionError"),
            (aiohttp.ClientConnectionError("cannot connect"), "ConnectionError"),
        ],
        ids=["urllib3-max-retry", "urllib3-read-timeout", "timeout", "reset", "aiohttp"],
    )
    def test_transport_failures_are_retryable(self, exc: Exception, reason: str) -> None:
        """Timeouts and broken connections become RetryableError with a reason saying which."""
        with pytest.raises(RetryableError) as caught, translate_errors():
            raise exc
        assert caught.value.reason == reason
        assert caught.value.status is None

    def test_programming_errors_pass_through_unchanged(self) -> None:
        """A bug in our code (KeyError) is not disguised as an API failure."""
        with pytest.raises(KeyError), translate_errors():
            raise KeyError("spec")

    def test_api_errors_pass_through_unchanged(self) -> None:
        """An ApiError raised inside the block is not wrapped a second time."""
        error = ConflictError("stale", status=409, reason="Conflict")
        with pytest.raises(ConflictError) as caught, translate_errors():
            raise error
        assert caught.value is error


class _StatusHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = status_body(404, "NotFound", 'namespaces "missing" not found').encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def status_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _StatusHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def test_real_client_404_over_http_becomes_not_found(status_server: str) -> None:
    """A 404 answered over HTTP to the real kubernetes client surfaces as NotFoundError."""
    configuration = client.Configuration(host=status_server)
    with client.ApiClient(configuration) as api_client:
        api = client.CoreV1Api(api_client)
        with pytest.raises(NotFoundError) as caught, translate_errors():
            api.read_namespace("missing")
    assert caught.value.message == 'namespaces "missing" not found'
    assert caught.value.reason == "NotFound"
