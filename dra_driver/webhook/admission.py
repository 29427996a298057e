"""From an AdmissionReview body to the HTTP answer: the webhook's decisions, without any I/O.

``/validate`` judges ResourceClaims and ResourceClaimTemplates at creation (their spec is
immutable, so an update never needs judging, and the controller's own finalizer updates never
wait for this webhook); ``/mutate`` refuses pods whose containers could not each be told
their own shares (:mod:`dra_driver.webhook.containers`) and gates the others at creation, and
refuses claims and templates whose capacity requests the API server would drop; with
``label_templates`` it also marks the templates whose pods the chart's admission policy may
gate without it (:mod:`dra_driver.webhook.templates`).
The cluster's state comes through :class:`Cluster`, which the informer cache implements and
tests fake.

Anything that is not a decision is not a 200: a malformed review is a 400, a review before the
cache is synced a 503, a bug a 500. kube-apiserver then applies the webhook's
``failurePolicy`` instead of a denial the user could not act on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final, Protocol, TypedDict

from dra_driver.api import Backend, DriverNames
from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from dra_driver.logging import get_logger
from dra_driver.quota import Quota
from dra_driver.validation.capacity import Limits
from dra_driver.validation.claimspec import validate_claim_spec
from dra_driver.validation.dropped import dropped_capacity
from dra_driver.validation.quota import quota_problems
from dra_driver.webhook import review
from dra_driver.webhook.containers import container_problems
from dra_driver.webhook.pods import PodContext, cached_or_fetched, gate_patch, once
from dra_driver.webhook.review import AdmissionRequest, JsonPatchOp, MalformedReviewError
from dra_driver.webhook.templates import policy_gate_patch

log = get_logger(__name__)

RESOURCE_GROUP: Final = "resource.k8s.io"
RESOURCE_VERSION: Final = "v1"
_CREATE: Final = "CREATE"


class Cluster(Protocol):
    """What deciding needs to know about the cluster."""

    @property
    def synced(self) -> bool:
        """Whether every cache holds a complete list."""

    def device_classes(self) -> Mapping[str, ObjectView]:
        """Return every DeviceClass by name."""

    def limits(self) -> Limits:
        """Return what the published cards allow."""

    def template(self, namespace: str, name: str) -> ObjectView | None:
        """Return a cached ResourceClaimTemplate."""

    def claim(self, namespace: str, name: str) -> ObjectView | None:
        """Return a cached ResourceClaim."""

    def fetch_template(self, namespace: str, name: str) -> ObjectView | None:
        """Read a ResourceClaimTemplate from the API server; ``None`` if it cannot be read."""

    def fetch_claim(self, namespace: str, name: str) -> ObjectView | None:
        """Read a ResourceClaim from the API server; ``None`` if it cannot be read."""

    def quotas(self, namespace: str) -> list[Quota]:
        """Return the enforceable GpuShareQuotas of ``namespace``."""


@dataclass(frozen=True)
class Outcome:
    """The HTTP answer and how to count it.

    ``result`` is ``allowed``, ``denied``, ``patched``, ``malformed``, ``unavailable`` or
    ``error``; ``kind`` is the reviewed object's kind (empty when the review is unreadable).
    """

    status: int
    body: bytes
    kind: str
    result: str

    @property
    def content_type(self) -> str:
        """JSON for an AdmissionReview, plain text for the error bodies."""
        if self.status == HTTPStatus.OK:
            return "application/json"
        return "text/plain; charset=utf-8"


Decide = Callable[[AdmissionRequest], tuple[bytes, str]]


class _SpecContext(TypedDict):
    """What each check of a claim spec takes besides the spec and limits: path, driver, classes."""

    path: str
    names: DriverNames
    classes: Mapping[str, ObjectView]


class Admission:
    """Decides reviews for one driver against one cluster."""

    def __init__(
        self,
        names: DriverNames,
        cluster: Cluster,
        default_backend: Backend = Backend.HAMI_CORE,
        *,
        label_templates: bool = False,
    ) -> None:
        self._names = names
        self._cluster = cluster
        self._default_backend = default_backend
        self._label_templates = label_templates

    def validate(self, body: bytes) -> Outcome:
        """Answer a validating review of a ResourceClaim or ResourceClaimTemplate."""
        return self._answer(body, self._validate)

    def mutate(self, body: bytes) -> Outcome:
        """Answer a mutating review of a pod, or of a claim or template before fields drop."""
        return self._answer(body, self._mutate)

    def _answer(self, body: bytes, decide: Decide) -> Outcome:
        try:
            request = review.parse_review(body)
        except MalformedReviewError as exc:
            return _failure(HTTPStatus.BAD_REQUEST, f"malformed AdmissionReview: {exc}", "")
        if not self._cluster.synced:
            return _failure(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "the webhook's cache is not synced yet",
                request.kind,
            )
        try:
            answer, result = decide(request)
        except Exception:  # a bug must cost one review, never the server
            log.exception("webhook.review_failed", kind=request.kind, uid=request.uid)
            return _failure(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error", request.kind)
        return Outcome(HTTPStatus.OK, answer, request.kind, result)

    def _spec_context(self, spec_path: str) -> _SpecContext:
        return {"path": spec_path, "names": self._names, "classes": self._cluster.device_classes()}

    def _validate(self, request: AdmissionRequest) -> tuple[bytes, str]:
        found = _claim_spec(request)
        if found is None:
            return review.allowed(request.uid), "allowed"
        obj, spec_path, spec = found
        generated = _generated_for_pod(obj)
        context = self._spec_context(spec_path)
        errors = validate_claim_spec(
            spec,
            **context,
            limits=Limits() if generated else self._cluster.limits(),
            default_backend=self._default_backend,
        )
        if not errors and not generated:
            # A claim from a template was checked with its template, against the quotas then.
            errors = quota_problems(
                spec,
                path=spec_path,
                names=self._names,
                classes=context["classes"],
                quotas=self._cluster.quotas(request.namespace),
            )
        if not errors:
            return review.allowed(request.uid), "allowed"
        log.info(
            "webhook.denied",
            kind=request.kind,
            namespace=request.namespace,
            name=request.name,
            errors=len(errors),
        )
        return review.denied(request.uid, errors), "denied"

    def _mutate(self, request: AdmissionRequest) -> tuple[bytes, str]:
        found = _claim_spec(request)
        if found is not None:
            return self._mutate_spec(request, *found)
        pod = request.object
        if (
            request.operation != _CREATE
            or pod is None
            or (request.group, request.kind) != ("", "Pod")
        ):
            return review.allowed(request.uid), "allowed"
        cluster = self._cluster
        # One live read per missing object per review, however often it is looked up.
        templates = once(cached_or_fetched(cluster.template, cluster.fetch_template))
        claims = once(cached_or_fetched(cluster.claim, cluster.fetch_claim))
        classes = cluster.device_classes()
        context = PodContext(self._names, classes, templates, claims, request.namespace)
        problems = container_problems(pod, context, self._default_backend)
        if problems:
            log.info("webhook.pod_denied", namespace=request.namespace, name=request.name)
            return review.denied(request.uid, problems), "denied"
        patch = gate_patch(pod, context)
        if not patch:
            return review.allowed(request.uid), "allowed"
        log.info("webhook.gated", namespace=request.namespace, name=request.name)
        return review.patched(request.uid, patch), "patched"

    def _mutate_spec(
        self, request: AdmissionRequest, obj: ObjectView, spec_path: str, spec: ObjectView
    ) -> tuple[bytes, str]:
        """Refuse capacity requests the API server would drop; label a template for the policy."""
        context = self._spec_context(spec_path)
        errors = dropped_capacity(spec, **context, limits=self._cluster.limits())
        if errors:
            log.info("webhook.capacity_dropped", kind=request.kind, name=request.name)
            return review.denied(request.uid, errors), "denied"
        label: list[JsonPatchOp] = []
        if self._label_templates and request.kind == "ResourceClaimTemplate":
            label = policy_gate_patch(obj, self._names, context["classes"])
        if not label:
            return review.allowed(request.uid), "allowed"
        return review.patched(request.uid, label), "patched"


def _claim_spec(request: AdmissionRequest) -> tuple[ObjectView, str, ObjectView] | None:
    """Return the object, the path of its claim spec and the spec of a claim or template create."""
    obj = request.object
    spec_path = {"ResourceClaim": "spec", "ResourceClaimTemplate": "spec.spec"}.get(request.kind)
    if (
        request.operation != _CREATE
        or obj is None
        or spec_path is None
        or (request.group, request.version) != (RESOURCE_GROUP, RESOURCE_VERSION)
    ):
        return None
    spec = objects.spec(obj)
    if spec_path == "spec.spec":
        spec = objects.spec(spec)
    return obj, spec_path, spec


def _failure(status: HTTPStatus, message: str, kind: str) -> Outcome:
    result = {
        HTTPStatus.BAD_REQUEST: "malformed",
        HTTPStatus.SERVICE_UNAVAILABLE: "unavailable",
    }.get(status, "error")
    return Outcome(int(status), f"{message}\n".encode(), kind, result)


def _generated_for_pod(obj: Mapping[str, Any]) -> bool:
    """Whether a claim was generated from a template for a pod.

    Its template passed the same checks when it was created. Checking it again against the
    cards published now would refuse it while a node restarts (its slices are gone for a
    while), and the pod would wait on kube-controller-manager's retry backoff.
    """
    references = objects.metadata(obj).get("ownerReferences") or []
    return any(r.get("kind") == "Pod" and r.get("controller") for r in references)
