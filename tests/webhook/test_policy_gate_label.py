"""The webhook marks the templates whose pods the chart's admission policy may gate alone."""

from __future__ import annotations

import pytest
from gpushare_simulator.harness.apiserver.patch import json_patch
from webhook.kit import (
    DRIVER,
    NAMES,
    NVIDIA,
    FakeCluster,
    Object,
    claim,
    claim_spec,
    classes,
    decoded_patch,
    request,
    response,
    review,
    template,
)

from dra_driver.validation.capacity import Limits
from dra_driver.webhook.admission import Admission
from dra_driver.webhook.templates import policy_gate_patch

LABEL = NAMES.policy_gate
ONE_SHARE = claim_spec(request(capacity={"cores": "30", "memory": "5Gi"}))
TWO_SHARES = claim_spec(request("a"), request("b"))
WITH_NVIDIA = claim_spec(request("ours"), request("theirs", device_class=NVIDIA))
FIRST_AVAILABLE = claim_spec({
    "name": "gpu",
    "firstAvailable": [
        {"name": "big", "deviceClassName": DRIVER},
        {"name": "small", "deviceClassName": DRIVER},
    ],
})  # fmt: skip


def labelled(spec: Object, labels: dict[str, str] | None) -> Object:
    """Return the template of ``spec`` with ``labels`` (no labels map when ``None``)."""
    obj = template(spec)
    if labels is not None:
        obj["metadata"]["labels"] = labels
    return obj


def applied(obj: Object) -> Object:
    """Return ``obj`` with its policy-gate patch applied, as kube-apiserver applies it."""
    result = json_patch(obj, policy_gate_patch(obj, NAMES, classes()))
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize(
    ("spec", "labels", "expected"),
    [
        (ONE_SHARE, None, {LABEL: "true"}),
        (ONE_SHARE, {"team": "a"}, {"team": "a", LABEL: "true"}),
        (ONE_SHARE, {LABEL: "yes"}, {LABEL: "true"}),
        (FIRST_AVAILABLE, None, {LABEL: "true"}),
        (WITH_NVIDIA, None, None),
        (TWO_SHARES, None, None),
        (TWO_SHARES, {LABEL: "true", "team": "a"}, {"team": "a"}),
        (claim_spec(request(device_class=NVIDIA)), {LABEL: "true"}, {}),
        (claim_spec(request(device_class="unknown.example.com")), None, None),
    ],
    ids=[
        "one-request",
        "keeps-other-labels",
        "corrects-a-wrong-value",
        "first-available-is-one-request",
        "another-drivers-request-beside-it",
        "two-requests-not-marked",
        "user-label-removed-from-two-requests",
        "user-label-removed-from-another-driver",
        "unknown-class-not-marked",
    ],
)
def test_a_template_is_marked_exactly_when_its_one_request_is_ours(
    spec: Object, labels: dict[str, str] | None, expected: dict[str, str] | None
) -> None:
    """A single request, of this driver, gets the label; any other template ends without it."""
    result = applied(labelled(spec, labels))
    assert result["metadata"].get("labels") == expected


def test_a_template_already_marked_needs_no_patch() -> None:
    """A correctly marked template is answered without a patch (nothing to change)."""
    assert policy_gate_patch(labelled(ONE_SHARE, {LABEL: "true"}), NAMES, classes()) == []


def test_the_label_key_is_escaped_in_the_json_pointer() -> None:
    """The ``/`` of the label key is written ``~1``, so the patch addresses one label."""
    (op,) = policy_gate_patch(labelled(ONE_SHARE, {"team": "a"}), NAMES, classes())
    assert op["path"] == f"/metadata/labels/{DRIVER}~1policy-gate"


def test_the_mutating_review_of_a_template_carries_the_label_when_enabled() -> None:
    """With label_templates the template's review is patched; without it, only allowed."""
    body = review(template(ONE_SHARE))
    on = response(Admission(NAMES, FakeCluster(), label_templates=True).mutate(body).body)
    assert on["allowed"] is True
    assert decoded_patch(on) == [
        {"op": "add", "path": "/metadata/labels", "value": {LABEL: "true"}}
    ]
    off = response(Admission(NAMES, FakeCluster()).mutate(body).body)
    assert off["allowed"] is True
    assert "patch" not in off


def test_claims_are_never_labelled() -> None:
    """A ResourceClaim (not a template) is allowed unchanged: the policy reads templates only."""
    body = review(claim(ONE_SHARE))
    answer = response(Admission(NAMES, FakeCluster(), label_templates=True).mutate(body).body)
    assert answer["allowed"] is True
    assert "patch" not in answer


def test_a_refused_template_gets_the_refusal_not_the_label() -> None:
    """A template whose capacity the API server would drop is refused, not marked."""
    body = review(template(ONE_SHARE))
    cluster = FakeCluster(limits_value=Limits(shareable=False))  # no consumable capacity
    answer = response(Admission(NAMES, cluster, label_templates=True).mutate(body).body)
    assert answer["allowed"] is False
    assert "patch" not in answer
