"""Which pods the controller holds back because another pod uses their hami-core claim."""

from __future__ import annotations

from typing import Any

import pytest
from controller.kit import NAMES

from dra_driver.api import Backend
from dra_driver.api.classes import default_device_classes
from dra_driver.controller.sharing import claim_in_use
from dra_driver.structured.config import chosen_backend

Object = dict[str, Any]
CLASSES = {c["metadata"]["name"]: c for c in default_device_classes(NAMES)}
GATE = NAMES.scheduling_gate


def config(backend: str, requests: list[str] | None = None) -> Object:
    """Return an opaque config entry of our driver choosing ``backend``."""
    parameters = {
        "apiVersion": NAMES.config_api_version,
        "kind": NAMES.config_kind,
        "backend": backend,
    }
    entry: Object = {"opaque": {"driver": NAMES.driver, "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    return entry


def claim(name: str = "shared", *, backend: str | None = None, owner: str | None = None) -> Object:
    """Return a named claim of one share (made for pod ``owner`` from a template if given)."""
    devices: Object = {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": NAMES.default_device_class}}]
    }
    if backend is not None:
        devices["config"] = [config(backend)]
    metadata: Object = {"name": name, "namespace": "default", "uid": f"claim-{name}"}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": owner, "controller": True}
        ]
    return {"metadata": metadata, "spec": {"devices": devices}, "status": {}}


def pod(name: str, claim_name: str = "shared", *, gated: bool, phase: str = "Pending") -> Object:
    """Return a pod (uid = name) that refers to the named claim ``claim_name``."""
    spec: Object = {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": spec,
        "status": {"phase": phase},
    }


def judge(
    me: Object, claims: list[Object], pods: list[Object], default: Backend = Backend.HAMI_CORE
) -> str | None:
    """Run the check for pod ``me`` with our classes."""
    return claim_in_use(me, claims, pods, CLASSES, names=NAMES, default_backend=default)


def test_a_running_pod_of_a_hami_core_claim_holds_the_next_one() -> None:
    """An ungated pod on a named claim with the default backend holds another, and is named."""
    me, other = pod("b", gated=True), pod("a", gated=False, phase="Running")
    reason = judge(me, [claim()], [me, other])
    assert reason is not None
    assert 'ResourceClaim "shared" is in use by pod "a"' in reason
    assert "resourceClaimTemplateName" in reason
    assert 'backend "none"' in reason


def test_pods_still_gated_or_finished_do_not_hold_it() -> None:
    """A pod still behind our gate (not scheduled yet) or one that ended does not count."""
    me = pod("c", gated=True)
    waiting = pod("a", gated=True)
    done = pod("b", gated=False, phase="Succeeded")
    assert judge(me, [claim()], [me, waiting, done]) is None


def test_a_pod_just_ungated_holds_it_before_the_cache_shows_it() -> None:
    """A pod the controller has just ungated counts even while its cached copy has the gate."""
    me, other = pod("b", gated=True), pod("a", gated=True)
    reason = claim_in_use(
        me,
        [claim()],
        [me, other],
        CLASSES,
        names=NAMES,
        default_backend=Backend.HAMI_CORE,
        ungated={"a"},
    )
    assert reason is not None
    assert 'pod "a"' in reason


def test_a_claim_made_for_the_pod_is_never_held() -> None:
    """A claim the pod owns (from its template) cannot be someone else's."""
    me = pod("me", gated=True)
    other = pod("a", gated=False)
    assert judge(me, [claim(owner="me")], [me, other]) is None


@pytest.mark.parametrize(
    ("claim_backend", "default", "held"),
    [
        (None, Backend.HAMI_CORE, True),
        (None, Backend.NONE, False),
        (None, Backend.MPS, False),
        ("none", Backend.HAMI_CORE, False),
        ("mps", Backend.HAMI_CORE, False),
        ("hami-core", Backend.NONE, True),
    ],
)
def test_only_claims_that_end_up_with_hami_core_are_held(
    claim_backend: str | None, default: Backend, held: bool
) -> None:
    """The claim's own backend wins over the plugins' default; only hami-core serves one pod."""
    me, other = pod("b", gated=True), pod("a", gated=False)
    reason = judge(me, [claim(backend=claim_backend)], [me, other], default)
    assert (reason is not None) is held


def test_reservations_count_unless_the_pod_is_known_to_have_ended() -> None:
    """A reservation for a pod not in the cache holds; one for a finished pod does not."""
    me = pod("me", gated=True)
    reserved = claim()
    reserved["status"]["reservedFor"] = [{"resource": "pods", "name": "ghost", "uid": "ghost"}]
    reason = judge(me, [reserved], [me])
    assert reason is not None
    assert '"ghost"' in reason
    assert judge(me, [reserved], [me, pod("ghost", gated=False, phase="Failed")]) is None


def test_the_pods_own_reservation_does_not_hold_it() -> None:
    """A claim reserved for the pod being judged is not in use by another."""
    me = pod("me", gated=True)
    reserved = claim()
    reserved["status"]["reservedFor"] = [{"resource": "pods", "name": "me", "uid": "me"}]
    assert judge(me, [reserved], [me]) is None


def test_a_pod_in_another_namespace_does_not_hold_it() -> None:
    """Claims are namespaced: a same-named claim elsewhere is another claim."""
    me = pod("me", gated=True)
    elsewhere = pod("a", gated=False)
    elsewhere["metadata"]["namespace"] = "other"
    assert judge(me, [claim()], [me, elsewhere]) is None


def test_chosen_backend_merges_class_then_claim_configs() -> None:
    """The claim's config wins over its class's; none set gives None; a bad one gives None."""
    classes = dict(CLASSES)
    default_class = dict(classes[NAMES.default_device_class])
    default_class["spec"] = {**default_class["spec"], "config": [config("mps")]}
    classes[NAMES.default_device_class] = default_class
    assert chosen_backend(claim()["spec"], NAMES, CLASSES) is None
    assert chosen_backend(claim()["spec"], NAMES, classes) is Backend.MPS
    assert chosen_backend(claim(backend="none")["spec"], NAMES, classes) is Backend.NONE
    assert chosen_backend(claim(backend="hostile")["spec"], NAMES, CLASSES) is None


def test_chosen_backend_reads_only_configs_for_our_requests() -> None:
    """A config aimed at another request, or at another driver, is not ours to read."""
    spec = claim()["spec"]
    spec["devices"]["config"] = [config("none", requests=["other"])]
    assert chosen_backend(spec, NAMES, CLASSES) is None
    foreign = config("none")
    foreign["opaque"]["driver"] = "other.example.com"
    spec["devices"]["config"] = [foreign]
    assert chosen_backend(spec, NAMES, CLASSES) is None
    spec["devices"]["requests"][0]["exactly"]["deviceClassName"] = "unknown-class"
    spec["devices"]["config"] = [config("none")]
    assert chosen_backend(spec, NAMES, CLASSES) is None
