"""Hold back a second pod of a ResourceClaim whose backend keeps one account per pod. Pure.

With backend ``hami-core``, a prepared claim's processes share one accounting region, and
HAMi-core drops the process slots whose PIDs it cannot see in its own PID namespace: two pods
on one claim erase each other's accounting, and the memory limit stops holding. The webhook
refuses a pod whose ResourceClaim is already reserved for another pod, but pods created
together pass it side by side, and the kubelet prepares a claim once per node, so the second
pod would silently share the first one's region.

The controller decides one pod at a time, which closes that gap: a gated pod whose named
ResourceClaim (not one made for it from a template) is in use by another pod stays gated,
with an event saying by whom, until that pod has ended. A pod is in use of a claim when it
refers to it, has not finished, and is not held by our gate (kube-scheduler may bind it at
any moment), or when the claim is reserved for it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from dra_driver.api import Backend, DriverNames
from dra_driver.api.errors import quote
from dra_driver.controller.view import pods_referring
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.structured.config import chosen_backend


def claim_in_use(
    pod: Object,
    claims: Sequence[Object],
    pods: Iterable[Object],
    classes: Mapping[str, Object],
    *,
    names: DriverNames,
    default_backend: Backend,
    ungated: Collection[str] = (),
) -> str | None:
    """Return why ``pod`` must stay gated because another pod uses one of its claims, or None.

    ``claims`` are the pod's claims of this driver, ``pods`` every pod the controller knows
    and ``default_backend`` the plugins' backend for claims whose config names none.
    ``ungated`` are the UIDs of pods whose gate the controller removed while ``pods`` may still
    show it: the decision right after ungating one must not count it as waiting.
    """
    uid = objects.uid(pod)
    known = list(pods)
    for claim in claims:
        if objects.controller_uid(claim) == uid:
            continue  # made for this pod from a template: nobody else can use it
        backend = chosen_backend(claim.get("spec") or {}, names, classes) or default_backend
        if backend is not Backend.HAMI_CORE:
            continue
        others = _users(claim, uid, known, names.scheduling_gate, ungated)
        if others:
            pod_list = ", ".join(quote(name) for name in others)
            return (
                f"ResourceClaim {quote(claim['metadata']['name'])} is in use by pod {pod_list}; "
                f"with backend {quote(Backend.HAMI_CORE)} a claim serves one pod at a time, "
                "whose processes keep one account of the share: this pod stays gated until "
                "then; give it a claim of its own (resourceClaimTemplateName), or a claim "
                'with backend "none", to run both at once'
            )
    return None


def _users(
    claim: Object, uid: str, pods: Sequence[Object], gate: str, ungated: Collection[str]
) -> list[str]:
    """Return the names of the pods other than ``uid`` that use ``claim`` now or soon."""
    users = {
        objects.uid(other): str(other["metadata"]["name"])
        for other in pods_referring(pods, claim)
        if objects.uid(other) != uid
        and (objects.uid(other) in ungated or not objects.has_scheduling_gate(other, gate))
    }
    finished = {objects.uid(other) for other in pods if objects.is_terminal(other)}
    for reference in objects.status(claim).get("reservedFor") or []:
        reserved = str(reference.get("uid") or "")
        if reference.get("resource") == "pods" and reserved not in (uid, *finished):
            users.setdefault(reserved, str(reference.get("name") or reserved))
    return sorted(set(users.values()))
