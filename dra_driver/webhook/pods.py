"""The scheduling gate that hands a new pod to the controller before kube-scheduler sees it.

A pod uses our driver when one of its ``spec.resourceClaims`` names a ResourceClaimTemplate or
a ResourceClaim that asks for one of our DeviceClasses. Such a pod gets the gate
``<driver>/allocation`` at creation (gates can only be removed after it, never added); every
other pod is left exactly as it is. Pure apart from a log line for a claim nobody can find.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from dra_driver.api import DriverNames
from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from dra_driver.logging import get_logger
from dra_driver.structured.classes import spec_uses_driver
from dra_driver.webhook.review import JsonPatchOp

Lookup = Callable[[str, str], ObjectView | None]
"""Find an object by ``(namespace, name)``; ``None`` when it does not exist (or is unknown)."""

log = get_logger(__name__)


@dataclasses.dataclass(frozen=True)
class PodContext:
    """What judging a pod's claims needs: the driver's names and where to find its objects."""

    names: DriverNames
    classes: Mapping[str, ObjectView]
    templates: Lookup
    claims: Lookup
    namespace: str = ""
    """The admission request's namespace, for a pod whose metadata has none yet."""

    def of(self, pod: ObjectView) -> PodContext:
        """Return this context in the namespace of ``pod`` (its own, else the request's)."""
        namespace = str(objects.metadata(pod).get("namespace") or self.namespace)
        return dataclasses.replace(self, namespace=namespace)


def cached_or_fetched(cached: Lookup, fetch: Lookup) -> Lookup:
    """Look in the cache first, then ask ``fetch`` (a live GET): the informer may lag."""

    def lookup(namespace: str, name: str) -> ObjectView | None:
        found = cached(namespace, name)
        return found if found is not None else fetch(namespace, name)

    return lookup


def once(lookup: Lookup) -> Lookup:
    """Remember each answer of ``lookup``, missing ones included, for one review."""
    answers: dict[tuple[str, str], ObjectView | None] = {}

    def remembered(namespace: str, name: str) -> ObjectView | None:
        key = (namespace, name)
        if key not in answers:
            answers[key] = lookup(namespace, name)
        return answers[key]

    return remembered


def gate_patch(pod: ObjectView, context: PodContext) -> list[JsonPatchOp]:
    """Return the JSON Patch that adds our scheduling gate to ``pod``, or ``[]``.

    Nothing is added to a pod already gated, to one already bound to a node (the API server
    forbids gates there), or to one that does not use our driver. A claim or template that
    cannot be found counts as not ours: the pod then waits for it like any other, and the
    controller never sees it, so it is logged.
    """
    spec = objects.spec(pod)
    gates = spec.get("schedulingGates")
    gate_name = context.names.scheduling_gate
    if spec.get("nodeName") or any((gate or {}).get("name") == gate_name for gate in gates or []):
        return []
    if not _uses_driver(spec, context.of(pod)):
        return []
    gate = {"name": gate_name}
    if isinstance(gates, list) and gates:
        return [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]


def _uses_driver(spec: ObjectView, context: PodContext) -> bool:
    namespace = context.namespace
    for entry in spec.get("resourceClaims") or []:
        if entry.get("resourceClaimTemplateName"):
            kind, name = "ResourceClaimTemplate", str(entry["resourceClaimTemplateName"])
            found = context.templates(namespace, name)
            claim_spec = ((found or {}).get("spec") or {}).get("spec") or {}
        elif entry.get("resourceClaimName"):
            kind, name = "ResourceClaim", str(entry["resourceClaimName"])
            found = context.claims(namespace, name)
            claim_spec = (found or {}).get("spec") or {}
        else:
            continue
        if found is None:
            log.warning(
                "webhook.pod_claim_unknown",
                kind=kind,
                namespace=namespace,
                name=name,
                pod_claim=entry.get("name"),
                effect="the pod is not gated; kube-scheduler allocates it if it ever can",
            )
            continue
        if spec_uses_driver(claim_spec, context.classes, context.names.driver):
            return True
    return False
