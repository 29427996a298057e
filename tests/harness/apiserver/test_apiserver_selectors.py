"""Label and field selectors on lists, as the API server parses and applies them."""

from __future__ import annotations

import json

import pytest
from gpushare_simulator.harness.apiserver import ApiError, FakeApiServer
from gpushare_simulator.harness.apiserver.resources import REGISTRY
from gpushare_simulator.harness.apiserver.selectors import (
    parse_field_selector,
    parse_label_selector,
)
from harness.apiserver.builders import claim, pod, resource_slice
from kubernetes import client
from kubernetes.client.rest import ApiException

LABELS = {"app": "web", "tier": "front", "rank": "3"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", True),
        ("app==web,tier=front", True),
        ("app!=web", False),
        ("app in (db, web)", True),
        ("tier notin (front)", False),
        ("app", True),
        ("!app", False),
        ("missing!=x", True),
        ("rank>2,rank<4", True),
        ("", True),
    ],
)
def test_label_selector_grammar(selector: str, expected: bool) -> None:
    """Equality, set-based, existence and numeric requirements match like labels.Parse."""
    obj = {"metadata": {"labels": LABELS}}
    assert parse_label_selector(selector).matches(obj) is expected


@pytest.mark.parametrize("selector", ["app in (web", "=x", "app notin web", "rank>x"])
def test_malformed_label_selector_is_bad_request(selector: str) -> None:
    """Unparseable label selectors are a 400 BadRequest."""
    with pytest.raises(ApiError) as caught:
        parse_label_selector(selector)
    assert caught.value.code == 400


def test_field_selector_escapes_and_negation() -> None:
    """Field values may escape ',' and '='; '!=' negates; missing fields read as empty."""
    rtype = REGISTRY.resolve("pods")
    obj = {"metadata": {"name": "a,b"}, "spec": {"nodeName": "n1"}}
    assert parse_field_selector(r"metadata.name=a\,b", rtype).matches(obj)
    assert parse_field_selector("spec.nodeName!=n2,status.phase=", rtype).matches(obj)


def test_label_selector_filters_lists(resource_api: client.ResourceV1Api) -> None:
    """A list with labelSelector answers only matching objects."""
    resource_api.create_namespaced_resource_claim("default", claim("c1", labels={"team": "a"}))
    resource_api.create_namespaced_resource_claim("default", claim("c2", labels={"team": "b"}))
    listed = resource_api.list_resource_claim_for_all_namespaces(label_selector="team in (b,c)")
    assert [c.metadata.name for c in listed.items] == ["c2"]


def test_field_selectors_on_slices(resource_api: client.ResourceV1Api) -> None:
    """Slices filter by spec.nodeName and spec.driver, the selectors the kubelet and drivers use."""
    resource_api.create_resource_slice(resource_slice("a", "n1"))
    other = resource_slice("b", "n2")
    other["spec"]["driver"] = "other.example.com"
    resource_api.create_resource_slice(other)
    by_node = resource_api.list_resource_slice(field_selector="spec.nodeName=n2")
    by_driver = resource_api.list_resource_slice(field_selector="spec.driver=gpushare.dra.dev")
    assert [s.metadata.name for s in by_node.items] == ["b"]
    assert [s.metadata.name for s in by_driver.items] == ["a"]


def test_field_selectors_on_pods(server: FakeApiServer, core_api: client.CoreV1Api) -> None:
    """Pods filter by spec.nodeName, status.phase and metadata.name."""
    core_api.create_namespaced_pod("default", pod("p1"))
    core_api.create_namespaced_pod("default", pod("p2"))
    server.bind("default", "p2", "n1")
    core_api.patch_namespaced_pod_status("p2", "default", {"status": {"phase": "Running"}})
    names = lambda selector: [  # noqa: E731
        p.metadata.name
        for p in core_api.list_namespaced_pod("default", field_selector=selector).items
    ]
    assert names("spec.nodeName=n1") == ["p2"]
    assert names("spec.nodeName=") == ["p1"]
    assert names("status.phase=Pending") == ["p1"]
    assert names("metadata.name=p1") == ["p1"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("pods", "field label not supported: spec.foo"),
        (
            "slices",
            "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.foo",
        ),
        (
            "claims",
            '"spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
    ],
)
def test_unsupported_field_label_is_bad_request(
    api_client: client.ApiClient, call: str, message: str
) -> None:
    """An unsupported field label is a 400 with the kind-specific message of the real server."""
    lists = {
        "pods": client.CoreV1Api(api_client).list_pod_for_all_namespaces,
        "slices": client.ResourceV1Api(api_client).list_resource_slice,
        "claims": client.ResourceV1Api(api_client).list_resource_claim_for_all_namespaces,
    }
    with pytest.raises(ApiException) as caught:
        lists[call](field_selector="spec.foo=x")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == message


def test_slice_pool_name_is_not_a_field_selector(resource_api: client.ResourceV1Api) -> None:
    """spec.pool.name is a client-side index in client-go, not a server field selector: 400."""
    with pytest.raises(ApiException) as caught:
        resource_api.list_resource_slice(field_selector="spec.pool.name=n1")
    assert caught.value.status == 400
