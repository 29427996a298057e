"""Refuse pods whose containers would be told another container's limits. Pure.

The kubelet gives a container the CDI devices of the requests it names (all of a claim's when
it names no request). Each request's devices carry that request's per-card limits, numbered
from 0 over its own cards, and, for HAMi-core, its own accounting region. So:

- a container may get the devices of one request of this driver at most: two requests (two
  claims, a claim with two requests, or two requests named) would each number their cards
  from 0, and one would overwrite the other's limits;
- with backend ``hami-core``, no two containers that run at the same time may use one request:
  they would share one region, and HAMi-core forgets the processes it cannot see, so each
  would erase the other's accounting;
- with backend ``hami-core``, a ResourceClaim reserved for another pod is not shared: for the
  same reason across pods.

Each refusal is a field error naming the container, the claim and request, and what to do.
Init containers run before the others (one at a time), so they share nothing with them unless
they are sidecars (``restartPolicy: Always``), which run beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from dra_driver.api import Backend, DriverNames
from dra_driver.api.errors import quote
from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from dra_driver.structured.classes import driver_requests
from dra_driver.structured.config import chosen_backend
from dra_driver.webhook.pods import PodContext

_FORBIDDEN: Final = "Forbidden"


@dataclass(frozen=True)
class _PodClaim:
    """One ``spec.resourceClaims`` entry that asks for this driver's devices."""

    claim: str
    """The ResourceClaim's name, or ``template <name>`` for one made per pod."""
    requests: tuple[str, ...]
    backend: Backend
    reserved_for: tuple[str, ...]
    """Pods a shared ResourceClaim is reserved for now (none for a template's claim)."""


@dataclass(frozen=True)
class _Container:
    where: str
    name: str
    concurrent: bool
    """Runs beside the pod's other containers (not a one-shot init container)."""
    claims: Sequence[ObjectView]


def container_problems(pod: ObjectView, context: PodContext, default_backend: Backend) -> list[str]:
    """Return why ``pod``'s containers cannot each be told exactly their own shares."""
    spec = objects.spec(pod)
    ours = _pod_claims(spec, context.of(pod), default_backend)
    if not ours:
        return []
    containers = list(_containers(spec))
    problems: list[str] = []
    users: dict[tuple[str, str], list[_Container]] = {}
    for container in containers:
        units = _units(container, ours)
        if len(units) > 1:
            problems.append(_too_many(container, units, context.names))
        if container.concurrent:
            for unit in units:
                users.setdefault(unit, []).append(container)
    for (entry, request), sharing in users.items():
        if len(sharing) > 1 and ours[entry].backend is Backend.HAMI_CORE:
            problems.append(_shared(sharing, ours[entry], request))
    pod_name = str(objects.metadata(pod).get("name") or "")
    problems += [
        _reserved(entry, claim, [p for p in claim.reserved_for if p != pod_name])
        for entry, claim in ours.items()
        if claim.backend is Backend.HAMI_CORE and any(p != pod_name for p in claim.reserved_for)
    ]
    return problems


def _containers(spec: ObjectView) -> list[_Container]:
    found = []
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            sidecar = container.get("restartPolicy") == "Always"
            found.append(
                _Container(
                    where=f"spec.{kind}[{index}].resources.claims",
                    name=str(container.get("name", "")),
                    concurrent=kind == "containers" or sidecar,
                    claims=(container.get("resources") or {}).get("claims") or [],
                )
            )
    return found


def _units(container: _Container, ours: Mapping[str, _PodClaim]) -> list[tuple[str, str]]:
    """Return the (pod claim entry, request) pairs of ours whose devices the container gets."""
    units: list[tuple[str, str]] = []
    for use in container.claims:
        claim = ours.get(str(use.get("name", "")))
        if claim is None:
            continue
        request = use.get("request")
        named = [str(request)] if request else list(claim.requests)
        units += [(str(use["name"]), r) for r in named if r in claim.requests]
    return list(dict.fromkeys(units))


def _pod_claims(
    spec: ObjectView, context: PodContext, default_backend: Backend
) -> dict[str, _PodClaim]:
    names, classes, namespace = context.names, context.classes, context.namespace
    found: dict[str, _PodClaim] = {}
    for entry in spec.get("resourceClaims") or []:
        reserved: tuple[str, ...] = ()
        if entry.get("resourceClaimTemplateName"):
            label = f"template {entry['resourceClaimTemplateName']}"
            template = context.templates(namespace, str(entry["resourceClaimTemplateName"]))
            claim_spec = ((template or {}).get("spec") or {}).get("spec") or {}
        elif entry.get("resourceClaimName"):
            label = str(entry["resourceClaimName"])
            claim = context.claims(namespace, label) or {}
            claim_spec = objects.spec(claim)
            reserved = tuple(
                str(ref.get("name"))
                for ref in objects.status(claim).get("reservedFor") or []
                if ref.get("resource") == "pods"
            )
        else:
            continue
        requests = driver_requests(claim_spec, classes, names.driver)
        if requests:
            backend = chosen_backend(claim_spec, names, classes) or default_backend
            found[str(entry.get("name", ""))] = _PodClaim(label, requests, backend, reserved)
    return found


def _too_many(container: _Container, units: Sequence[tuple[str, str]], names: DriverNames) -> str:
    given = ", ".join(f"request {quote(r)} of claim {quote(e)}" for e, r in units)
    return (
        f"{container.where}: {_FORBIDDEN}: container {quote(container.name)} would get the "
        f"devices of {given}; a container can use one request of {names.driver}, because "
        "each request's cards are numbered from 0 and limited by that number: name one "
        "request per container (resources.claims[].request), or ask for the cards in one "
        "request (count: N)"
    )


def _shared(sharing: Sequence[_Container], claim: _PodClaim, request: str) -> str:
    who = " and ".join(quote(c.name) for c in sharing)
    return (
        f"{sharing[1].where}: {_FORBIDDEN}: containers {who} both use request {quote(request)} "
        f"of claim {quote(claim.claim)} with backend {quote(Backend.HAMI_CORE)}, whose "
        "processes must all see each other to keep one account of the share: give each "
        'container a request (or claim) of its own, or use backend "none"'
    )


def _reserved(entry: str, claim: _PodClaim, others: Sequence[str]) -> str:
    pods = ", ".join(quote(pod) for pod in others)
    return (
        f"spec.resourceClaims[{quote(entry)}]: {_FORBIDDEN}: ResourceClaim {quote(claim.claim)} "
        f"is in use by pod {pods}; with backend {quote(Backend.HAMI_CORE)} a claim serves one "
        "pod, whose processes keep one account of the share: give this pod a claim of its "
        "own (a resourceClaimTemplateName)"
    )
