"""``Status`` errors and field errors shaped exactly like the real API server's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

JSON = dict[str, Any]

OBJECT_MODIFIED: Final = (
    "the object has been modified; please apply your changes to the latest version and try again"
)

_TYPE_TEXT: Final = {
    "FieldValueRequired": "Required value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooMany": "Too many",
    "FieldValueTooLong": "Too long",
    "FieldValueNotFound": "Not found",
}
# Types whose message never shows the bad value (apimachinery's ErrorBody).
_VALUELESS: Final = frozenset({"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong"})

REASONS: Final = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class _Omitted:
    """Marker for a field error whose bad value is not shown."""

    def __repr__(self) -> str:
        return "<omitted>"


OMIT: Final = _Omitted()


def go_value(value: object) -> str:
    """Render a bad value roughly as Go's ``%q``/``%v``/``%#v`` would."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "[]string{" + ", ".join(json.dumps(item) for item in value) + "}"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class FieldError:
    """One ``field.Error``: a type, a field path, the bad value and a detail."""

    type: str
    field: str
    value: object = OMIT
    detail: str = ""

    def body(self) -> str:
        """Return ``ErrorBody()``: the message without the field path."""
        text = _TYPE_TEXT[self.type]
        if self.type not in _VALUELESS and self.value is not OMIT:
            text = f"{text}: {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> JSON:
        """Return the ``StatusCause`` the API server reports for this error."""
        return {"reason": self.type, "message": self.body(), "field": self.field}


def required(field: str, detail: str = "") -> FieldError:
    """``field.Required``."""
    return FieldError("FieldValueRequired", field, OMIT, detail)


def invalid(field: str, value: object, detail: str) -> FieldError:
    """``field.Invalid``."""
    return FieldError("FieldValueInvalid", field, value, detail)


def not_supported(field: str, value: object, valid: Sequence[str]) -> FieldError:
    """``field.NotSupported``."""
    detail = "supported values: " + ", ".join(json.dumps(v) for v in valid) if valid else ""
    return FieldError("FieldValueNotSupported", field, value, detail)


def duplicate(field: str, value: object) -> FieldError:
    """``field.Duplicate``."""
    return FieldError("FieldValueDuplicate", field, value)


def forbidden(field: str, detail: str) -> FieldError:
    """``field.Forbidden``."""
    return FieldError("FieldValueForbidden", field, OMIT, detail)


def too_many(field: str, actual: int, maximum: int) -> FieldError:
    """``field.TooMany``."""
    return FieldError("FieldValueTooMany", field, actual, f"must have at most {maximum} items")


def too_long(field: str, maximum: int) -> FieldError:
    """``field.TooLong``."""
    return FieldError("FieldValueTooLong", field, OMIT, f"may not be more than {maximum} bytes")


def field_not_found(field: str, value: object) -> FieldError:
    """``field.NotFound``."""
    return FieldError("FieldValueNotFound", field, value)


class ApiError(Exception):
    """A request failed; :meth:`status` is the ``Status`` object the server answers with."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: JSON | None = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = tuple(headers)

    def status(self) -> JSON:
        """Return the ``meta/v1`` ``Status`` body."""
        body: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # empty in a webhook's denial that gave none; Go omits it then
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def qualified_resource(group: str, resource: str) -> str:
    """Return ``resource.group`` (just ``resource`` for the core group)."""
    return f"{resource}.{group}" if group else resource


def _details(group: str, kind: str, name: str, **extra: object) -> JSON:
    details: JSON = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details.update(extra)
    return details


def not_found(group: str, resource: str, name: str) -> ApiError:
    """``errors.NewNotFound``."""
    message = f'{qualified_resource(group, resource)} "{name}" not found'
    return ApiError(404, "NotFound", message, _details(group, resource, name))


def already_exists(group: str, resource: str, name: str) -> ApiError:
    """``errors.NewAlreadyExists``."""
    message = f'{qualified_resource(group, resource)} "{name}" already exists'
    return ApiError(409, "AlreadyExists", message, _details(group, resource, name))


def conflict(group: str, resource: str, name: str, detail: str = OBJECT_MODIFIED) -> ApiError:
    """``errors.NewConflict``: by default the stale-resourceVersion message."""
    message = f'Operation cannot be fulfilled on {qualified_resource(group, resource)} "{name}": '
    return ApiError(409, "Conflict", message + detail, _details(group, resource, name))


def forbidden_request(group: str, resource: str, name: str, detail: str) -> ApiError:
    """``errors.NewForbidden``."""
    message = f'{qualified_resource(group, resource)} "{name}" is forbidden: {detail}'
    return ApiError(403, "Forbidden", message, _details(group, resource, name))


def invalid_object(group: str, kind: str, name: str, errors: Sequence[FieldError]) -> ApiError:
    """``errors.NewInvalid``: a 422 listing every field error as a cause."""
    qualified = f"{kind}.{group}" if group else kind
    aggregate = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    details = _details(group, kind, name, causes=[error.cause() for error in errors])
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {aggregate}', details)


def bad_request(message: str) -> ApiError:
    """``errors.NewBadRequest``."""
    return ApiError(400, "BadRequest", message)


def unprocessable(message: str) -> ApiError:
    """Return a generic 422 (how the server reports a JSON patch that cannot be applied)."""
    return ApiError(422, "Invalid", message)


def expired(message: str) -> ApiError:
    """``errors.NewResourceExpired`` (HTTP 410)."""
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    """``errors.NewInternalError``."""
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


def method_not_allowed() -> ApiError:
    """``errors.NewMethodNotSupported`` as the generic 405 of an unsupported verb."""
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


def path_not_found() -> ApiError:
    """Return the 404 the server gives for a path it does not serve."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def unsupported_media_type(content_type: str) -> ApiError:
    """Return the 415 for a body in a format the endpoint does not take."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"application/json-patch+json, application/merge-patch+json, "
        f"application/strategic-merge-patch+json (got {content_type!r})",
    )


def from_code(code: int, message: str) -> ApiError:
    """Return an error with the reason the server uses for ``code`` (for injected faults)."""
    headers = (("Retry-After", "1"),) if code in {429, 503} else ()
    return ApiError(code, REASONS.get(code, "Unknown"), message, None, headers)
