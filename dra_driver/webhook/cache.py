"""The webhook's view of the cluster: informers for classes, templates, claims and our slices.

Reviews are answered from these caches, so a decision costs no API call. A pod created right
after its template can reach the webhook before the template's watch event does; for that
case the template (or claim) is read from the API server, with a short timeout so the answer
still comes well inside the webhook's own timeout.

The caches keep only what a review reads (:class:`Kept`): of a claim its spec and the pods it
is reserved for, of a template its spec, of a slice each card's memory and whether it may be
shared. Whole, the claims of a large cluster were most of the process's memory (20,000 claims
with their allocations and managedFields: about 250 MB, in the controller's process, which
serves the webhook too), and an update of a claim's allocation is no change to a review.

Hosted by the controller, the webhook watches no claims, slices or classes of its own: it reads
the controller's caches of them (:class:`Borrowed`), which keep more of each object than
:class:`Kept` would. A second watch would decode every claim change twice in one process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.api.fields import MEMORY
from dra_driver.k8s import objects, raw
from dra_driver.k8s.compact import SharedParts, compact, pick
from dra_driver.k8s.custom import CustomList
from dra_driver.k8s.errors import ApiError, NotFoundError
from dra_driver.k8s.informer import EventType, Informer
from dra_driver.k8s.informergroup import InformerGroup
from dra_driver.k8s.objects import Object
from dra_driver.logging import get_logger
from dra_driver.quota import Quota, QuotaBook
from dra_driver.validation.capacity import Limits, limits_from_slices

log = get_logger(__name__)

# Seconds a live GET may take; the chart gives kube-apiserver a 5 s webhook timeout.
LIVE_READ_TIMEOUT: Final = 2.0


class Kept:
    """The informers' transforms: what admission reads of each object, equal specs kept once."""

    def __init__(self) -> None:
        self._parts = SharedParts()

    def _named(self, obj: Object) -> Object:
        return {**pick(obj, ("apiVersion", "kind")),
                "metadata": pick(obj.get("metadata"), ("name", "namespace", "uid"))}  # fmt: skip

    def template(self, template: Object) -> Object:
        """Keep a template's name and spec."""
        kept: Object = compact({**self._named(template), "spec": template.get("spec") or {}})
        self._parts.share(kept, "spec")
        return kept

    def claim(self, claim: Object) -> Object:
        """Keep a claim's name, spec and the pods it is reserved for (the shared-claim rule)."""
        reserved = (objects.status(claim).get("reservedFor")) or []
        kept: Object = compact({
            **self._named(claim),
            "spec": claim.get("spec") or {},
            "status": {"reservedFor": [pick(r, ("resource", "name")) for r in reserved]},
        })  # fmt: skip
        self._parts.share(kept, "spec")
        return kept

    def slice(self, resource_slice: Object) -> Object:
        """Keep a slice's pool and, of each device, its memory and whether it may be shared."""
        spec = objects.spec(resource_slice)
        devices = []
        for device in spec.get("devices") or []:
            kept = pick(device, ("name", "allowMultipleAllocations"))
            memory = (device.get("capacity") or {}).get(MEMORY)
            if memory is not None:
                kept["capacity"] = {MEMORY: memory}
            devices.append(kept)
        pool = pick(spec.get("pool"), ("name", "generation"))
        kept_slice: Object = compact(
            {**self._named(resource_slice), "spec": {"pool": pool, "devices": devices}}
        )
        return kept_slice


@dataclass(frozen=True)
class Borrowed:
    """Informers another part of the process runs, that the webhook reads as they are.

    Each must keep at least what :class:`Kept` keeps of its objects (the controller's keep
    more), the slices only this driver's, and none may have started yet: the webhook adds its
    handler to ``slices``. Their owner starts, stops and watches them.
    """

    classes: Informer
    claims: Informer
    slices: Informer
    quotas: Informer


class ClusterCache(InformerGroup):
    """Implements :class:`~dra_driver.webhook.admission.Cluster` on informers.

    With ``borrowed``, only the templates are watched here (:class:`Borrowed`).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        names: DriverNames,
        *,
        live_read_timeout: float = LIVE_READ_TIMEOUT,
        borrowed: Borrowed | None = None,
    ) -> None:
        resource = client.ResourceV1Api(api_client)
        self._resource = resource
        self._timeout = live_read_timeout
        self._lock = threading.Lock()
        self._limits: Limits | None = None
        self._slice_changes = 0
        kept = Kept()
        self.templates = Informer(
            resource.list_resource_claim_template_for_all_namespaces,
            name="webhook-templates",
            transform=kept.template,
        )
        if borrowed is not None:
            self.classes, self.claims = borrowed.classes, borrowed.claims
            self.slices, self.quota_objects = borrowed.slices, borrowed.quotas
            self._quotas = QuotaBook(self.quota_objects)
            self.slices.add_handler(self._slices_changed)
            super().__init__(
                self.templates,
                borrowed=(self.classes, self.claims, self.slices, self.quota_objects),
            )
            return
        self.classes = Informer(resource.list_device_class, name="webhook-classes")
        self.claims = Informer(
            resource.list_resource_claim_for_all_namespaces,
            name="webhook-claims",
            transform=kept.claim,
        )
        self.slices = Informer(
            resource.list_resource_slice,
            name="webhook-slices",
            handler=self._slices_changed,
            field_selector=f"spec.driver={names.driver}",
            transform=kept.slice,
        )
        # Optional: without the CRD no quota applies.
        self.quota_objects = Informer(
            CustomList(api_client, *names.quota_group_version, names.quota_plural),
            name="webhook-quotas",
            optional=True,
        )
        self._quotas = QuotaBook(self.quota_objects)
        super().__init__(self.classes, self.templates, self.claims, self.slices, self.quota_objects)

    def quotas(self, namespace: str) -> list[Quota]:
        """Return the enforceable GpuShareQuotas of ``namespace``."""
        return self._quotas.of(namespace)

    def device_classes(self) -> Mapping[str, Object]:
        """Return every DeviceClass by name."""
        return {str(c["metadata"]["name"]): c for c in self.classes.list()}

    def limits(self) -> Limits:
        """Return what our published cards allow, recomputed only after a slice changed."""
        with self._lock:
            limits, changes = self._limits, self._slice_changes
        if limits is None:
            limits = limits_from_slices(self.slices.list())
            with self._lock:
                # Kept only if no slice changed meanwhile; otherwise the next call recomputes.
                if self._slice_changes == changes:
                    self._limits = limits
        return limits

    def _slices_changed(self, kind: EventType, obj: Object) -> None:  # noqa: ARG002 - any change
        with self._lock:
            self._limits = None
            self._slice_changes += 1

    def template(self, namespace: str, name: str) -> Object | None:
        """Return a cached ResourceClaimTemplate."""
        return self.templates.get(namespace, name)

    def claim(self, namespace: str, name: str) -> Object | None:
        """Return a cached ResourceClaim."""
        return self.claims.get(namespace, name)

    def fetch_template(self, namespace: str, name: str) -> Object | None:
        """Read a ResourceClaimTemplate from the API server."""
        return self._fetch(self._resource.read_namespaced_resource_claim_template, namespace, name)

    def fetch_claim(self, namespace: str, name: str) -> Object | None:
        """Read a ResourceClaim from the API server."""
        return self._fetch(self._resource.read_namespaced_resource_claim, namespace, name)

    def _fetch(self, read: Callable[..., Any], namespace: str, name: str) -> Object | None:
        try:
            return raw.call(read, name, namespace, _request_timeout=self._timeout)
        except NotFoundError:
            return None
        except ApiError as exc:
            log.warning("webhook.read_failed", namespace=namespace, name=name, error=str(exc))
            return None
