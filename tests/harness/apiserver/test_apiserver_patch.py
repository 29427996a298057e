"""PATCH semantics: JSON merge patch, JSON patch and strategic merge patch."""

from __future__ import annotations

from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import ApiError, FakeApiServer
from gpushare_simulator.harness.apiserver.patch import StrategicMerge, json_patch, merge_patch
from gpushare_simulator.harness.apiserver.resources import REGISTRY
from gpushare_simulator.harness.apiserver.schemas import schema_set
from harness.apiserver.builders import allocation, claim, pod, raw
from kubernetes import client
from kubernetes.client.rest import ApiException

USERS = [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(3)]


def smp(resource: str, target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    schemas = schema_set("1.36")
    return StrategicMerge(schemas).apply(
        target, patch, schemas.kind_schema(REGISTRY.resolve(resource))
    )


def test_merge_patch_deletes_nulls_and_replaces_lists() -> None:
    """RFC 7386: null removes a member, objects merge, arrays are replaced whole."""
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": True}
    assert merge_patch(target, {"a": {"b": None, "d": 3}, "l": [3]}) == {
        "a": {"c": 2, "d": 3},
        "l": [3],
        "keep": True,
    }


def test_json_patch_operations_and_failed_test() -> None:
    """RFC 6902 add/remove/replace/move/copy/test; a failing test is a 422."""
    doc = {"metadata": {"finalizers": ["a", "b"]}, "spec": {"x": 1}}
    patched = json_patch(
        doc,
        [
            {"op": "test", "path": "/spec/x", "value": 1},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
            {"op": "replace", "path": "/spec/x", "value": 2},
            {"op": "copy", "from": "/spec/x", "path": "/spec/y"},
            {"op": "move", "from": "/spec/y", "path": "/spec/z"},
        ],
    )
    assert patched == {"metadata": {"finalizers": ["b", "c"]}, "spec": {"x": 2, "z": 2}}
    assert doc["spec"] == {"x": 1}
    with pytest.raises(ApiError) as caught:
        json_patch(doc, [{"op": "test", "path": "/spec/x", "value": 9}])
    assert caught.value.code == 422


def test_json_patch_test_of_null_matches_an_absent_key_only() -> None:
    """As kube-apiserver's library: `test` null passes on a missing key, fails on a present one."""
    doc = {"metadata": {"name": "c"}}
    ops = [
        {"op": "test", "path": "/metadata/finalizers", "value": None},
        {"op": "add", "path": "/metadata/finalizers", "value": ["a/x"]},
    ]
    patched = json_patch(doc, ops)
    assert patched == {"metadata": {"name": "c", "finalizers": ["a/x"]}}
    with pytest.raises(ApiError) as present:
        json_patch(patched, ops)
    assert present.value.code == 422
    with pytest.raises(ApiError) as parent_missing:
        json_patch(doc, [{"op": "test", "path": "/spec/devices/config", "value": None}])
    assert parent_missing.value.code == 422


def test_strategic_merge_uses_schema_merge_keys() -> None:
    """reservedFor merges by uid, finalizers are a set, $patch: delete drops, others replace."""
    target = {
        "metadata": {"finalizers": ["a/x"]},
        "status": {
            "reservedFor": USERS[:2],
            "devices": [{"driver": "d", "pool": "p", "device": "g"}],
        },
    }
    merged = smp(
        "resourceclaims",
        target,
        {
            "metadata": {"finalizers": ["b/y", "a/x"]},
            "status": {
                "reservedFor": [USERS[2], {"uid": "u0", "$patch": "delete"}],
                "devices": [{"driver": "d2", "pool": "p", "device": "g"}],
            },
        },
    )
    assert merged["metadata"]["finalizers"] == ["a/x", "b/y"]
    assert [u["uid"] for u in merged["status"]["reservedFor"]] == ["u1", "u2"]
    # status.devices has a list-map but no patch strategy in the Go tags: replaced, as on a server
    assert merged["status"]["devices"] == [{"driver": "d2", "pool": "p", "device": "g"}]


def test_strategic_merge_directives() -> None:
    """$deleteFromPrimitiveList, $setElementOrder and $patch: replace on maps and lists."""
    target = {"metadata": {"finalizers": ["a/x", "b/y"], "labels": {"k": "v", "o": "w"}}}
    patched = smp(
        "pods",
        target,
        {
            "metadata": {
                "$deleteFromPrimitiveList/finalizers": ["a/x"],
                "$setElementOrder/finalizers": ["b/y"],
                "labels": {"$patch": "replace", "n": "m"},
            }
        },
    )
    assert patched["metadata"] == {"finalizers": ["b/y"], "labels": {"n": "m"}}
    spec = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}
    replaced = smp(
        "pods", spec, {"spec": {"containers": [{"name": "c", "image": "z"}, {"$patch": "replace"}]}}
    )
    assert replaced["spec"]["containers"] == [{"name": "c", "image": "z"}]
    merged = smp("pods", spec, {"spec": {"containers": [{"name": "b", "image": "new"}]}})
    assert [c["image"] for c in merged["spec"]["containers"]] == ["x", "new"]


def test_client_dict_patch_is_strategic(resource_api: client.ResourceV1Api) -> None:
    """The v37 client sends dict bodies as strategic merge: reservedFor entries merge by uid."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    resource_api.patch_namespaced_resource_claim_status(
        "c1", "default", {"status": {"allocation": allocation(), "reservedFor": USERS[:1]}}
    )
    merged = resource_api.patch_namespaced_resource_claim_status(
        "c1", "default", {"status": {"reservedFor": USERS[1:2]}}
    )
    assert [u.uid for u in merged.status.reserved_for] == ["u0", "u1"]


def test_client_list_patch_is_json_patch(resource_api: client.ResourceV1Api) -> None:
    """The client sends list bodies as JSON patch; removing the last finalizer works that way."""
    resource_api.create_namespaced_resource_claim(
        "default", claim("c1", finalizers=["a.io/x", "b.io/y"])
    )
    patched = resource_api.patch_namespaced_resource_claim(
        "c1",
        "default",
        [
            {"op": "test", "path": "/metadata/finalizers/0", "value": "a.io/x"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ],
    )
    assert patched.metadata.finalizers == ["b.io/y"]


def test_merge_patch_over_http(api_client: client.ApiClient, server: FakeApiServer) -> None:
    """application/merge-patch+json replaces lists: the finalizer list is exactly what is sent."""
    server.create(claim("c1", finalizers=["a.io/x", "b.io/y"]))
    code, body, _ = raw(
        api_client,
        "PATCH",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1",
        {"metadata": {"finalizers": ["b.io/y"], "labels": {"a": "b"}}},
        content_type="application/merge-patch+json",
    )
    assert code == 200
    assert body["metadata"]["finalizers"] == ["b.io/y"]
    assert body["metadata"]["labels"] == {"a": "b"}


def test_patch_with_stale_resource_version_conflicts(resource_api: client.ResourceV1Api) -> None:
    """metadata.resourceVersion in a patch body is a precondition: stale is 409."""
    created = resource_api.create_namespaced_resource_claim("default", claim("c1"))
    resource_api.patch_namespaced_resource_claim(
        "c1", "default", {"metadata": {"labels": {"a": "1"}}}
    )
    stale = {
        "metadata": {"resourceVersion": created.metadata.resource_version, "labels": {"a": "2"}}
    }
    with pytest.raises(ApiException) as caught:
        resource_api.patch_namespaced_resource_claim("c1", "default", stale)
    assert caught.value.status == 409


def test_pod_status_conditions_merge_by_type(core_api: client.CoreV1Api) -> None:
    """A status patch of one condition keeps the others (merge key 'type')."""
    core_api.create_namespaced_pod("default", pod("p1"))
    core_api.patch_namespaced_pod_status(
        "p1", "default", {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    )
    patched = core_api.patch_namespaced_pod_status(
        "p1",
        "default",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    )
    assert {c.type for c in patched.status.conditions} == {"PodScheduled", "Ready"}
    assert patched.status.phase == "Running"


def test_unsupported_patch_type_is_415(api_client: client.ApiClient, server: FakeApiServer) -> None:
    """Server-side apply is not implemented: apply-patch+yaml answers 415 UnsupportedMediaType."""
    server.create(claim("c1"))
    code, body, _ = raw(
        api_client,
        "PATCH",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1",
        {"metadata": {"labels": {"a": "b"}}},
        content_type="application/apply-patch+yaml",
    )
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")


def test_patch_of_missing_object_is_404(resource_api: client.ResourceV1Api) -> None:
    """PATCH never creates: a missing object is 404."""
    with pytest.raises(ApiException) as caught:
        resource_api.patch_namespaced_resource_claim(
            "nope", "default", {"metadata": {"labels": {"a": "b"}}}
        )
    assert caught.value.status == 404


def test_a_patch_that_changes_the_uid_is_refused_as_immutable(
    api_client: client.ApiClient, server: FakeApiServer
) -> None:
    """As kube-apiserver: a merge patch naming another metadata.uid is a 422, not applied."""
    created = server.create(claim("c1"))
    code, body, _ = raw(
        api_client,
        "PATCH",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1",
        {"metadata": {"uid": "other", "labels": {"a": "b"}}},
        content_type="application/merge-patch+json",
    )
    assert code == 422
    assert 'metadata.uid: Invalid value: "other": field is immutable' in body["message"]
    stored = server.get("resourceclaims", "default", "c1")
    assert stored is not None
    assert stored["metadata"]["uid"] == created["metadata"]["uid"]
    assert "labels" not in stored["metadata"]
