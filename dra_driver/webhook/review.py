"""AdmissionReview v1: reading a request and writing the three kinds of answer.

kube-apiserver shows a denial to the user as ``admission webhook "<name>" denied the request:
<message>``, with the HTTP status and reason of the response's ``status``. Denials here use
``422 Invalid``, the status the API server itself gives an object that fails validation, so
``kubectl`` prints ``Error from server (Invalid)`` as for any other invalid field; several field
errors are joined the way Kubernetes aggregates them, ``[first, second]``. Pure: bytes in,
bytes out.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

from dra_driver.k8s.objects import Object

JsonPatchOp = dict[str, Any]

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"
# kubectl prints the whole message; a claim with 32 bad requests must still give a readable one.
MAX_MESSAGE_BYTES: Final = 4096
_SEPARATOR: Final = ", "


class MalformedReviewError(ValueError):
    """The body is not an AdmissionReview v1 request; the server answers 400 Bad Request."""


@dataclass(frozen=True)
class AdmissionRequest:
    """The fields of ``request`` that deciding needs."""

    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    name: str
    object: Mapping[str, Any] | None


def _string(request: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    value = request.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise MalformedReviewError(f"request.{key} must be a non-empty string")
    return value


def parse_review(body: bytes) -> AdmissionRequest:
    """Read an AdmissionReview v1 request; raise :class:`MalformedReviewError` saying why not."""
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedReviewError(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise MalformedReviewError("the body is not JSON: nested too deeply") from None
    if not isinstance(review, dict):
        raise MalformedReviewError("the body must be a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise MalformedReviewError(
            f"expected apiVersion {API_VERSION!r} and kind {KIND!r}; configure the webhook "
            "with admissionReviewVersions: [v1]"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReviewError("request must be an object")
    kind = request.get("kind")
    if not isinstance(kind, dict):
        raise MalformedReviewError("request.kind must be an object")
    obj = request.get("object")
    if obj is not None and not isinstance(obj, dict):
        raise MalformedReviewError("request.object must be an object")
    return AdmissionRequest(
        uid=_string(request, "uid", required=True),
        group=_string(kind, "group"),
        version=_string(kind, "version"),
        kind=_string(kind, "kind"),
        operation=_string(request, "operation", required=True),
        namespace=_string(request, "namespace"),
        name=_string(request, "name"),
        object=obj,
    )


def aggregate(errors: Sequence[str], limit: int = MAX_MESSAGE_BYTES) -> str:
    """Join field errors as Kubernetes does (``a`` alone, else ``[a, b]``), within ``limit`` bytes.

    Errors that do not fit are counted (``and 3 more``) instead of cut in the middle; only a
    first error too long on its own is shortened.
    """
    if len(errors) == 1:
        return _shorten(errors[0], limit)
    shown: list[str] = []
    for error in errors:
        candidate = [*shown, error]
        if len(_join(candidate, len(errors) - len(candidate)).encode()) > limit:
            break
        shown = candidate
    if not shown:
        # Room for the brackets and the count, whatever their length.
        shown = [_shorten(errors[0], limit - 32)]
    return _join(shown, len(errors) - len(shown))


def _join(shown: Sequence[str], more: int) -> str:
    return "[" + _SEPARATOR.join([*shown, f"and {more} more"] if more else shown) + "]"


def _shorten(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "..."


def _review(response: Object) -> bytes:
    return json.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response}).encode()


def allowed(uid: str) -> bytes:
    """Admit the object unchanged."""
    return _review({"uid": uid, "allowed": True})


def denied(uid: str, errors: Sequence[str]) -> bytes:
    """Refuse the object with its field errors, as ``422 Invalid``."""
    status = HTTPStatus.UNPROCESSABLE_ENTITY
    return _review(
        {
            "uid": uid,
            "allowed": False,
            "status": {
                "status": "Failure",
                "code": int(status),
                "reason": "Invalid",
                "message": aggregate(errors),
            },
        }
    )


def patched(uid: str, patch: Sequence[JsonPatchOp]) -> bytes:
    """Admit the object with a JSON Patch (RFC 6902) applied; no patch is a plain admission."""
    if not patch:
        return allowed(uid)
    encoded = base64.b64encode(json.dumps(list(patch)).encode()).decode()
    return _review({"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": encoded})
