"""The writes preemption makes: a claim's nomination annotation, and evictions.

A nomination is a merge patch of one annotation at the claim's resourceVersion (a claim
changed meanwhile gets a conflict, and the decision is made again); after an error of unknown
outcome the claim is read back, as for every claim write (:mod:`writes`). An eviction goes
through the Eviction API, never a plain delete, so the victim's PodDisruptionBudgets and its
graceful termination hold; the precondition on its UID keeps a pod re-created under the same
name from being evicted in its place.
"""

from __future__ import annotations

import dataclasses
from http import HTTPStatus

from kubernetes import client

from dra_driver.controller.writes import ClaimWriter
from dra_driver.engine.nomination import PodRef
from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import ConflictError, NotFoundError, RetryableError
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.objects import Object


@dataclasses.dataclass(frozen=True)
class Evicted:
    """The API server took the eviction, or the pod was gone already."""


@dataclasses.dataclass(frozen=True)
class Refused:
    """The eviction was refused now (a disruption budget, usually); ``message`` says why."""

    message: str


class EvictionWriter:
    """Nominates claims and evicts pods through one API client."""

    def __init__(self, api_client: client.ApiClient, claims: ClaimWriter, annotation: str) -> None:
        self._api = api_client
        self._claims = claims
        self._resource = client.ResourceV1Api(api_client)
        self._annotation = annotation

    def nominate(self, claim: Object, value: str | None) -> Object:
        """Set the claim's nomination annotation to ``value`` (``None`` removes it)."""
        metadata = {
            "resourceVersion": claim["metadata"]["resourceVersion"],
            "annotations": {self._annotation: value},
        }
        namespace, name = object_key(claim)
        try:
            written: Object = raw.call(
                self._resource.patch_namespaced_resource_claim,
                name,
                namespace,
                {"metadata": metadata},
                _content_type=raw.MERGE_PATCH,
            )
        except RetryableError:
            current = self._claims.read_claim(claim)
            annotations = objects.metadata(current or {}).get("annotations") or {}
            if current is None or objects.uid(current) != objects.uid(claim):
                raise
            if annotations.get(self._annotation) != value:
                raise
            return current
        return written

    def evict(self, pod: PodRef) -> Evicted | Refused:
        """Ask the API server to evict ``pod``; a pod already gone counts as evicted."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}},
        }
        try:
            raw.post(
                self._api,
                "/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                body,
                namespace=pod.namespace,
                name=pod.name,
            )
        except (NotFoundError, ConflictError):
            # Gone, or the UID precondition failed: another pod has taken its name.
            return Evicted()
        except RetryableError as exc:
            if exc.status == HTTPStatus.TOO_MANY_REQUESTS:
                return Refused(str(exc))
            raise
        return Evicted()
