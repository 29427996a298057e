"""Pods whose containers could not each be told their own shares are refused, saying why."""

from __future__ import annotations

from typing import Any

import pytest
from webhook.kit import (
    DRIVER,
    NAMES,
    Object,
    claim,
    claim_spec,
    classes,
    config,
    request,
    template,
)

from dra_driver.api import Backend
from dra_driver.webhook.containers import container_problems
from dra_driver.webhook.pods import PodContext

TWO_REQUESTS = template(
    claim_spec(
        request("a", capacity={"cores": "40", "memory": "8Gi"}),
        request("b", capacity={"cores": "10", "memory": "2Gi"}),
    ),
    "two",
)
ONE_REQUEST = template(claim_spec(request("gpu", capacity={"cores": "30"})), "one")
NO_BACKEND = template(
    claim_spec(request("gpu", capacity={"cores": "30"}), configs=[config(backend="none")]),
    "plain",
)


def container(name: str, *uses: tuple[str, str | None], **fields: Any) -> Object:
    claims = [{"name": entry, **({"request": req} if req else {})} for entry, req in uses]
    return {"name": name, "image": "cuda", "resources": {"claims": claims}, **fields}


def pod_of(*containers: Object, claims: dict[str, str], init: list[Object] | None = None) -> Object:
    entries = [{"name": entry, "resourceClaimTemplateName": t} for entry, t in claims.items()]
    spec: Object = {"containers": list(containers), "resourceClaims": entries}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def problems(
    pod: Object, *, default: Backend = Backend.HAMI_CORE, shared: Object | None = None
) -> list[str]:
    templates = {t["metadata"]["name"]: t for t in (TWO_REQUESTS, ONE_REQUEST, NO_BACKEND)}
    context = PodContext(
        NAMES,
        classes(),
        templates=lambda _, name: templates.get(name),
        claims=lambda _, name: shared if shared and name == "shared" else None,
        namespace="default",
    )
    return container_problems(pod, context, default)


def test_one_container_per_request_of_a_two_request_claim_is_allowed() -> None:
    """Each container names one request: each is told exactly that request's share."""
    pod = pod_of(
        container("a", ("gpus", "a")), container("b", ("gpus", "b")), claims={"gpus": "two"}
    )
    assert problems(pod) == []


def test_a_container_naming_a_two_request_claim_whole_is_refused() -> None:
    """Both requests' limits would be numbered from 0: refused, naming container and requests."""
    pod = pod_of(container("main", ("gpus", None)), claims={"gpus": "two"})
    assert problems(pod) == [
        'spec.containers[0].resources.claims: Forbidden: container "main" would get the devices '
        'of request "a" of claim "gpus", request "b" of claim "gpus"; a container can use one '
        f"request of {DRIVER}, because each request's cards are numbered from 0 and limited by "
        "that number: name one request per container (resources.claims[].request), or ask for "
        "the cards in one request (count: N)"
    ]


@pytest.mark.parametrize(
    "uses",
    [
        (("gpus", "a"), ("gpus", "b")),
        (("first", None), ("second", None)),
    ],
    ids=["two-requests-named", "two-claims"],
)
def test_a_container_getting_two_requests_is_refused(
    uses: tuple[tuple[str, str | None], ...],
) -> None:
    """Two requests by name, or two claims: either way two numberings in one container."""
    pod = pod_of(container("main", *uses), claims={"gpus": "two", "first": "one", "second": "one"})
    (problem,) = problems(pod)
    assert problem.startswith('spec.containers[0].resources.claims: Forbidden: container "main"')


def test_two_containers_sharing_a_hami_core_request_are_refused() -> None:
    """One region for both containers' processes: refused; with backend none it is allowed."""
    shared = pod_of(
        container("main", ("gpu", None)), container("side", ("gpu", None)), claims={"gpu": "one"}
    )
    assert problems(shared) == [
        'spec.containers[1].resources.claims: Forbidden: containers "main" and "side" both use '
        'request "gpu" of claim "template one" with backend "hami-core", whose processes must '
        "all see each other to keep one account of the share: give each container a request "
        '(or claim) of its own, or use backend "none"'
    ]
    assert problems(shared, default=Backend.NONE) == []
    plain = pod_of(
        container("main", ("gpu", None)), container("side", ("gpu", None)), claims={"gpu": "plain"}
    )
    assert problems(plain) == []


def test_an_init_container_shares_only_when_it_runs_beside_the_others() -> None:
    """A one-shot init container runs before; a sidecar (restartPolicy Always) runs beside."""
    init = container("setup", ("gpu", None))
    pod = pod_of(container("main", ("gpu", None)), claims={"gpu": "one"}, init=[init])
    assert problems(pod) == []
    sidecar = container("proxy", ("gpu", None), restartPolicy="Always")
    pod = pod_of(container("main", ("gpu", None)), claims={"gpu": "one"}, init=[sidecar])
    (problem,) = problems(pod)
    assert 'containers "proxy" and "main" both use request "gpu"' in problem


def test_a_claim_in_use_by_another_pod_is_refused_under_hami_core() -> None:
    """A shared ResourceClaim already reserved for pod other: refused, naming it."""
    shared = claim(claim_spec(request("gpu", capacity={"cores": "30"})), "shared")
    shared["status"] = {"reservedFor": [{"resource": "pods", "name": "other", "uid": "u"}]}
    pod: Object = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [container("main", ("gpu", None))],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}],
        },
    }
    assert problems(pod, shared=shared) == [
        'spec.resourceClaims["gpu"]: Forbidden: ResourceClaim "shared" is in use by pod '
        '"other"; with backend "hami-core" a claim serves one pod, whose processes keep one '
        "account of the share: give this pod a claim of its own (a resourceClaimTemplateName)"
    ]
    shared["status"]["reservedFor"][0]["name"] = "p"  # itself, on a re-admission
    assert problems(pod, shared=shared) == []


def test_containers_without_claims_of_ours_are_left_alone() -> None:
    """A pod that names no claim of this driver is never judged."""
    pod = pod_of(container("main"), container("side"), claims={})
    assert problems(pod) == []
