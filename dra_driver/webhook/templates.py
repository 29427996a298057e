"""Mark the ResourceClaimTemplates whose pods the chart's admission policy may gate. Pure.

With ``gate.mode=policy`` (Kubernetes 1.36+) the chart installs a MutatingAdmissionPolicy that
gates a pod inside kube-apiserver, without calling this webhook, when the pod's only claim
comes from a template labelled ``<driver>/policy-gate: "true"`` and at most one container at a
time uses it, and the template has a single request (the policy reads that from the template
itself). CEL cannot look up DeviceClasses, so the policy cannot tell by itself whether a
template asks for this driver; the webhook can, once, when the template is created, and labels
a template whose one request asks for this driver. A pod using such a template alone cannot
hand one container two requests' limits, the only thing the webhook refuses in such a pod (with
one container using it, HAMi-core's accounting is not shared either). Every other pod with
claims still comes to the webhook, as before.

The label is the webhook's to decide at creation: one a user wrote on a template that does not
qualify is removed. One added later by hand can only make the policy gate a pod of a
single-request template of another driver, which the controller then ungates untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dra_driver.api import DriverNames
from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from dra_driver.structured.classes import driver_requests
from dra_driver.webhook.review import JsonPatchOp

LABEL_VALUE: Final = "true"


def policy_gate_patch(
    template: ObjectView, names: DriverNames, classes: Mapping[str, Mapping[str, Any]]
) -> list[JsonPatchOp]:
    """Return the JSON Patch that sets or removes the policy-gate label of ``template``."""
    key = names.policy_gate
    labels = objects.metadata(template).get("labels")
    if not isinstance(labels, dict):
        labels = None
    current = labels.get(key) if labels is not None else None
    claim_spec = objects.spec(objects.spec(template))
    requests = (claim_spec.get("devices") or {}).get("requests") or []
    qualifies = len(requests) == 1 and bool(driver_requests(claim_spec, classes, names.driver))
    path = f"/metadata/labels/{_pointer_token(key)}"
    if qualifies and current != LABEL_VALUE:
        if labels is None:
            return [{"op": "add", "path": "/metadata/labels", "value": {key: LABEL_VALUE}}]
        return [{"op": "add", "path": path, "value": LABEL_VALUE}]
    if not qualifies and current is not None:
        return [{"op": "remove", "path": path}]
    return []


def _pointer_token(key: str) -> str:
    """Escape a map key for a JSON Pointer (RFC 6901): ``~`` as ``~0``, ``/`` as ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")
