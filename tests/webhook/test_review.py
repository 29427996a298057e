"""AdmissionReview parsing and answers: malformed input, message size, patches."""

from __future__ import annotations

import json

import pytest
from webhook.kit import UID, decoded_patch, response

from dra_driver.webhook import review
from dra_driver.webhook.review import MAX_MESSAGE_BYTES, MalformedReviewError, parse_review


def _review(request: object) -> bytes:
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


GOOD = {"uid": UID, "kind": {"kind": "Pod"}, "operation": "CREATE"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xff\xfe", "the body is not JSON: "),
        (b"[" * 100_000, "the body is not JSON: nested too deeply"),
        (b"[]", "the body must be a JSON object"),
        (json.dumps({"kind": "AdmissionReview"}).encode(), "expected apiVersion"),
        (_review("x"), "request must be an object"),
        (_review({**GOOD, "kind": "Pod"}), "request.kind must be an object"),
        (_review({**GOOD, "uid": ""}), "request.uid must be a non-empty string"),
        (_review({**GOOD, "operation": 7}), "request.operation must be a non-empty string"),
        (_review({**GOOD, "object": [1]}), "request.object must be an object"),
        (_review({**GOOD, "namespace": 1}), "request.namespace must be a non-empty string"),
    ],
)
def test_malformed_reviews_are_refused_with_the_reason(body: bytes, reason: str) -> None:
    """Every malformed body raises MalformedReviewError (never another exception) saying why."""
    with pytest.raises(MalformedReviewError) as caught:
        parse_review(body)
    assert str(caught.value).startswith(reason)


def test_a_good_review_is_read_field_by_field() -> None:
    """Kind, operation, namespace, name and object come through; a missing group is core."""
    request = parse_review(
        _review({**GOOD, "namespace": "ns", "name": "p", "object": {"kind": "Pod"}})
    )
    assert (request.uid, request.group, request.kind, request.operation) == (
        UID,
        "",
        "Pod",
        "CREATE",
    )
    assert (request.namespace, request.name, request.object) == ("ns", "p", {"kind": "Pod"})


def test_many_errors_are_counted_instead_of_overflowing_the_message() -> None:
    """Past the size limit the message lists whole errors and says how many more there are."""
    errors = [
        f"spec.devices.requests[{i}].exactly.count: Invalid value: {i}: " + "x" * 100
        for i in range(100)
    ]
    message = review.aggregate(errors)
    assert len(message.encode()) <= MAX_MESSAGE_BYTES
    shown = message.count("Invalid value")
    assert 20 < shown < 100
    assert message.startswith(f"[{errors[0]}, {errors[1]}, ")
    assert message.endswith(f"{errors[shown - 1]}, and {100 - shown} more]")


def test_one_huge_error_is_shortened() -> None:
    """A single error longer than the limit is cut, so no denial exceeds a few KiB."""
    message = review.aggregate(["e" * 10_000])
    assert len(message.encode()) == MAX_MESSAGE_BYTES
    assert message.endswith("...")


def test_an_empty_patch_is_a_plain_admission() -> None:
    """No patch operations give an answer without patchType, as kube-apiserver expects."""
    assert response(review.patched(UID, [])) == {"uid": UID, "allowed": True}


def test_a_patch_is_base64_json_patch() -> None:
    """The patch travels base64-encoded with patchType JSONPatch."""
    ops = [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "g"}]}]
    answer = response(review.patched(UID, ops))
    assert answer["allowed"] is True
    assert decoded_patch(answer) == ops
