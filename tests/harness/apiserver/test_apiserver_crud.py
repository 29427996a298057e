"""CRUD contract of the fake API server, driven through the official sync client."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from harness.apiserver.builders import allocation, claim, node, pod, raw, resource_slice
from kubernetes import client
from kubernetes.client.rest import ApiException

from dra_driver.api import DEFAULT_DRIVER_NAME

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
MODIFIED = (
    'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "c1": the object has been '
    "modified; please apply your changes to the latest version and try again"
)


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    return body


def test_create_stamps_uid_timestamp_version_and_generation(
    resource_api: client.ResourceV1Api,
) -> None:
    """A new claim gets a uuid, an RFC 3339 timestamp, a numeric RV, generation 1 and defaults."""
    created = resource_api.create_namespaced_resource_claim("default", claim("c1"))
    meta = created.metadata
    assert re.fullmatch(r"[0-9a-f-]{36}", meta.uid)
    assert RFC3339.match(meta.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert meta.resource_version.isdigit()
    assert meta.generation == 1
    exactly = created.spec.devices.requests[0].exactly
    assert (exactly.allocation_mode, exactly.count) == ("ExactCount", 1)
    fetched = resource_api.read_namespaced_resource_claim("c1", "default")
    assert fetched.metadata.resource_version == meta.resource_version
    listed = resource_api.list_namespaced_resource_claim("default")
    assert [c.metadata.name for c in listed.items] == ["c1"]
    assert int(listed.metadata.resource_version) >= int(meta.resource_version)


def test_resource_versions_grow_on_every_write(resource_api: client.ResourceV1Api) -> None:
    """One global counter: every write gets a larger resourceVersion, across resources."""
    versions = [
        int(
            resource_api.create_namespaced_resource_claim(
                "default", claim("c1")
            ).metadata.resource_version
        ),
        int(
            resource_api.create_resource_slice(resource_slice("s1", "n1")).metadata.resource_version
        ),
        int(
            resource_api.patch_namespaced_resource_claim(
                "c1", "default", {"metadata": {"labels": {"a": "b"}}}
            ).metadata.resource_version
        ),
    ]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


def test_generate_name_appends_five_characters(core_api: client.CoreV1Api) -> None:
    """generateName yields the prefix plus 5 random characters from the server's alphabet."""
    body = pod("")
    body["metadata"] = {"generateName": "worker-", "namespace": "default"}
    names = {core_api.create_namespaced_pod("default", body).metadata.name for _ in range(3)}
    assert len(names) == 3
    assert all(re.fullmatch(r"worker-[bcdfghjklmnpqrstvwxz2456789]{5}", n) for n in names)


def test_duplicate_name_is_already_exists(resource_api: client.ResourceV1Api) -> None:
    """Creating a taken name answers 409 AlreadyExists with the server's message."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    with pytest.raises(ApiException) as caught:
        resource_api.create_namespaced_resource_claim("default", claim("c1"))
    status = status_of(caught.value)
    assert caught.value.status == 409
    assert status["reason"] == "AlreadyExists"
    assert status["message"] == 'resourceclaims.resource.k8s.io "c1" already exists'


def test_missing_object_is_not_found(resource_api: client.ResourceV1Api) -> None:
    """GET of a missing object is a 404 Status naming resource and name like the server's."""
    with pytest.raises(ApiException) as caught:
        resource_api.read_namespaced_resource_claim("nope", "default")
    status = status_of(caught.value)
    assert caught.value.status == 404
    assert status["message"] == 'resourceclaims.resource.k8s.io "nope" not found'
    assert status["details"] == {
        "name": "nope",
        "group": "resource.k8s.io",
        "kind": "resourceclaims",
    }


def test_missing_namespace_is_not_found(resource_api: client.ResourceV1Api) -> None:
    """Creating in a namespace that does not exist is 404 'namespaces "x" not found'."""
    with pytest.raises(ApiException) as caught:
        resource_api.create_namespaced_resource_claim("nope", claim("c1", namespace="nope"))
    assert caught.value.status == 404
    assert status_of(caught.value)["message"] == 'namespaces "nope" not found'


def test_stale_update_conflicts_and_unconditional_update_wins(
    resource_api: client.ResourceV1Api,
) -> None:
    """PUT with an old resourceVersion is 409 with the real text; without one it always wins."""
    stale = resource_api.create_namespaced_resource_claim("default", claim("c1"))
    fresh = resource_api.patch_namespaced_resource_claim(
        "c1", "default", {"metadata": {"labels": {"a": "1"}}}
    )
    stale.metadata.labels = {"a": "2"}
    with pytest.raises(ApiException) as caught:
        resource_api.replace_namespaced_resource_claim("c1", "default", stale)
    assert caught.value.status == 409
    assert status_of(caught.value)["message"] == MODIFIED
    stale.metadata.resource_version = None
    replaced = resource_api.replace_namespaced_resource_claim("c1", "default", stale)
    assert replaced.metadata.labels == {"a": "2"}
    assert int(replaced.metadata.resource_version) > int(fresh.metadata.resource_version)


def test_no_op_update_keeps_resource_version(resource_api: client.ResourceV1Api) -> None:
    """An update that changes nothing does not bump the resourceVersion (no event either)."""
    created = resource_api.create_namespaced_resource_claim("default", claim("c1"))
    same = resource_api.replace_namespaced_resource_claim("c1", "default", created)
    assert same.metadata.resource_version == created.metadata.resource_version


def test_name_mismatch_is_bad_request(api_client: client.ApiClient) -> None:
    """A PUT body naming another object is 400 with the server's message."""
    resource_api = client.ResourceV1Api(api_client)
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    code, status, _ = raw(
        api_client,
        "PUT",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1",
        claim("c2"),
    )
    assert code == 400
    assert (
        status["message"] == "the name of the object (c2) does not match the name on the URL (c1)"
    )


def test_malformed_json_is_bad_request(api_client: client.ApiClient) -> None:
    """A body that is not JSON is a 400 BadRequest."""
    code, status, _ = raw(
        api_client,
        "POST",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        "{not json",
    )
    assert code == 400
    assert status["reason"] == "BadRequest"


def test_unknown_path_and_verb(api_client: client.ApiClient) -> None:
    """Unknown resources are a 404 Status; a verb a path does not take is 405."""
    code, status, _ = raw(api_client, "GET", "/apis/resource.k8s.io/v1/widgets")
    assert (code, status["reason"]) == (404, "NotFound")
    code, status, _ = raw(api_client, "POST", "/api/v1/namespaces/default/pods/p1")
    assert (code, status["reason"]) == (405, "MethodNotAllowed")


def test_finalizers_delay_deletion_until_removed(resource_api: client.ResourceV1Api) -> None:
    """Delete with a finalizer sets deletionTimestamp; removing the finalizer removes the object."""
    body = claim("c1", finalizers=["gpushare.dra.dev/allocation"])
    resource_api.create_namespaced_resource_claim("default", body)
    deleting = resource_api.delete_namespaced_resource_claim("c1", "default")
    assert deleting.metadata.deletion_timestamp is not None
    assert deleting.metadata.deletion_grace_period_seconds == 0
    assert deleting.metadata.generation == 2
    again = resource_api.delete_namespaced_resource_claim("c1", "default")
    assert again.metadata.resource_version == deleting.metadata.resource_version
    with pytest.raises(ApiException) as caught:
        resource_api.patch_namespaced_resource_claim(
            "c1", "default", {"metadata": {"finalizers": ["gpushare.dra.dev/other"]}}
        )
    assert "no new finalizers can be added if the object is being deleted" in caught.value.body
    resource_api.patch_namespaced_resource_claim(
        "c1", "default", [{"op": "remove", "path": "/metadata/finalizers"}]
    )
    with pytest.raises(ApiException) as gone:
        resource_api.read_namespaced_resource_claim("c1", "default")
    assert gone.value.status == 404


def test_delete_preconditions_are_honoured(resource_api: client.ResourceV1Api) -> None:
    """DeleteOptions preconditions on uid and resourceVersion are 409 when they do not match."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other"))
    with pytest.raises(ApiException) as caught:
        resource_api.delete_namespaced_resource_claim("c1", "default", body=options)
    assert caught.value.status == 409
    assert (
        "Precondition failed: UID in precondition: other, UID in object meta:" in caught.value.body
    )
    deleted = resource_api.delete_namespaced_resource_claim("c1", "default")
    assert deleted.metadata.name == "c1"


def test_status_subresource_separates_spec_and_status(resource_api: client.ResourceV1Api) -> None:
    """Writes to the claim ignore status; writes to claims/status ignore spec and metadata."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    ignored = resource_api.patch_namespaced_resource_claim(
        "c1", "default", {"status": {"allocation": allocation()}}
    )
    assert ignored.status.allocation is None
    written = resource_api.patch_namespaced_resource_claim_status(
        "c1",
        "default",
        {"metadata": {"labels": {"x": "y"}}, "status": {"allocation": allocation()}},
    )
    assert written.status.allocation.devices.results[0].device == "gpu-0"
    assert written.metadata.labels is None
    assert written.metadata.generation == 1


def test_allocation_is_set_once_then_only_cleared(resource_api: client.ResourceV1Api) -> None:
    """status.allocation cannot change once set (422 'field is immutable'), but can be cleared."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    resource_api.patch_namespaced_resource_claim_status(
        "c1", "default", {"status": {"allocation": allocation()}}
    )
    with pytest.raises(ApiException) as caught:
        resource_api.patch_namespaced_resource_claim_status(
            "c1", "default", {"status": {"allocation": allocation("gpu-1")}}
        )
    assert caught.value.status == 422
    status = status_of(caught.value)
    assert status["details"]["causes"][0]["field"] == "status.allocation"
    assert status["message"].endswith(": field is immutable")
    cleared = resource_api.patch_namespaced_resource_claim_status(
        "c1", "default", {"status": {"allocation": None}}
    )
    assert cleared.status.allocation is None


def test_reserved_for_needs_allocation_and_no_new_entries_while_deleting(
    resource_api: client.ResourceV1Api,
) -> None:
    """reservedFor needs an allocation, and may not grow once deletionTimestamp is set."""
    resource_api.create_namespaced_resource_claim("default", claim("c1", finalizers=["a.b/c"]))
    user = {"resource": "pods", "name": "p1", "uid": "u1"}
    with pytest.raises(ApiException) as caught:
        resource_api.patch_namespaced_resource_claim_status(
            "c1", "default", {"status": {"reservedFor": [user]}}
        )
    assert "status.reservedFor: Forbidden: may not be specified when `allocated` is not set" in (
        caught.value.body
    )
    resource_api.patch_namespaced_resource_claim_status(
        "c1", "default", {"status": {"allocation": allocation(), "reservedFor": [user]}}
    )
    resource_api.delete_namespaced_resource_claim("c1", "default")
    late = {"resource": "pods", "name": "p2", "uid": "u2"}
    with pytest.raises(ApiException) as refused:
        resource_api.patch_namespaced_resource_claim_status(
            "c1", "default", {"status": {"reservedFor": [late]}}
        )
    assert "new entries may not be added while" in refused.value.body
    shrunk = resource_api.patch_namespaced_resource_claim_status(
        "c1", "default", {"status": {"reservedFor": [{"uid": "u1", "$patch": "delete"}]}}
    )
    assert shrunk.status.reserved_for is None


def test_claim_spec_is_immutable(resource_api: client.ResourceV1Api) -> None:
    """ResourceClaim spec never changes after creation (422 on spec.)."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    change = [{"op": "replace", "path": "/spec/devices/requests/0/name", "value": "other"}]
    with pytest.raises(ApiException) as caught:
        resource_api.patch_namespaced_resource_claim("c1", "default", change)
    assert caught.value.status == 422
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "spec"


def test_slice_driver_pool_and_node_are_immutable(resource_api: client.ResourceV1Api) -> None:
    """A ResourceSlice keeps its driver, pool name and node name; devices may change."""
    resource_api.create_resource_slice(resource_slice("s1", "n1"))
    with pytest.raises(ApiException) as caught:
        resource_api.patch_resource_slice("s1", {"spec": {"nodeName": "n2"}})
    assert (
        'spec.nodeName: Invalid value: "n2": field is immutable'
        in status_of(caught.value)["message"]
    )
    grown = resource_api.patch_resource_slice(
        "s1",
        {
            "spec": {
                "pool": {"generation": 2},
                "devices": resource_slice("x", "n1", 3)["spec"]["devices"],
            }
        },
    )
    assert len(grown.spec.devices) == 3
    assert grown.metadata.generation == 2


def test_binding_sets_node_once(api_client: client.ApiClient, core_api: client.CoreV1Api) -> None:
    """pods/binding sets spec.nodeName and PodScheduled; binding again is the server's 409."""
    core_api.create_namespaced_pod("default", pod("p1"))
    binding = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}}
    code, status, _ = raw(api_client, "POST", "/api/v1/namespaces/default/pods/p1/binding", binding)
    assert (code, status["status"]) == (201, "Success")
    bound = core_api.read_namespaced_pod("p1", "default")
    assert bound.spec.node_name == "n1"
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    again = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p1"),
        target=client.V1ObjectReference(kind="Node", name="n2"),
    )
    with pytest.raises(ApiException) as caught:
        core_api.create_namespaced_pod_binding("p1", "default", again, _preload_content=False)
    assert caught.value.status == 409
    assert status_of(caught.value)["message"] == (
        'Operation cannot be fulfilled on pods/binding "p1": '
        'pod p1 is already assigned to node "n1"'
    )


def test_gated_pod_cannot_be_bound_and_gates_only_shrink(
    api_client: client.ApiClient, core_api: client.CoreV1Api
) -> None:
    """A pod with scheduling gates refuses binding; gates may be removed but never added."""
    core_api.create_namespaced_pod("default", pod("p1", schedulingGates=[{"name": "a.io/gate"}]))
    binding = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}}
    code, status, _ = raw(api_client, "POST", "/api/v1/namespaces/default/bindings", binding)
    assert code == 409
    assert status["message"].endswith("pod p1 has non-empty .spec.schedulingGates")
    with pytest.raises(ApiException) as caught:
        core_api.patch_namespaced_pod(
            "p1", "default", {"spec": {"schedulingGates": [{"name": "b.io/x"}]}}
        )
    assert "only deletion is allowed, but found new scheduling gate 'b.io/x'" in caught.value.body
    ungated = core_api.patch_namespaced_pod(
        "p1", "default", [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    assert ungated.spec.scheduling_gates is None
    assert ungated.metadata.generation == 2


def test_pod_node_name_changes_only_through_binding(core_api: client.CoreV1Api) -> None:
    """Setting spec.nodeName with an update is forbidden like any other pod spec change."""
    core_api.create_namespaced_pod("default", pod("p1"))
    with pytest.raises(ApiException) as caught:
        core_api.patch_namespaced_pod("p1", "default", {"spec": {"nodeName": "n1"}})
    assert caught.value.status == 422
    assert "spec: Forbidden: pod updates may not change fields other than" in caught.value.body


def test_pod_defaults_and_status_on_create(core_api: client.CoreV1Api) -> None:
    """A new pod is Pending with a QoS class and the defaulted spec fields the server adds."""
    created = core_api.create_namespaced_pod(
        "default", {**pod("p1"), "status": {"phase": "Running"}}
    )
    assert (created.status.phase, created.status.qos_class) == ("Pending", "BestEffort")
    assert created.spec.restart_policy == "Always"
    assert created.spec.containers[0].termination_message_path == "/dev/termination-log"
    assert {t.key for t in created.spec.tolerations} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }


def test_delete_collection_by_field_selector(resource_api: client.ResourceV1Api) -> None:
    """DeleteCollection by spec.nodeName deletes that node's slices only (the kubelet's wipe)."""
    for name, node_name in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        resource_api.create_resource_slice(resource_slice(name, node_name))
    resource_api.delete_collection_resource_slice(
        field_selector="spec.nodeName=n1,spec.driver=gpushare.dra.dev"
    )
    assert [s.metadata.name for s in resource_api.list_resource_slice().items] == ["c"]


def test_pagination_with_limit_and_continue(core_api: client.CoreV1Api) -> None:
    """limit+continue walks a list in pages with remainingItemCount, in name order."""
    for index in range(7):
        core_api.create_node(node(f"node-{index}"))
    names, token, pages = [], None, 0
    while True:
        page = core_api.list_node(limit=3, _continue=token)
        pages += 1
        names += [n.metadata.name for n in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(names)
    assert pages == 3
    assert names == [f"node-{i}" for i in range(7)]


def test_quantities_are_stored_canonically(resource_api: client.ResourceV1Api) -> None:
    """Quantities come back in the server's canonical form ('1000' is '1k', '1024Mi' is '1Gi')."""
    body = resource_slice("s1", "n1", 1)
    body["spec"]["devices"][0]["capacity"]["memory"]["value"] = "1024Mi"
    body["spec"]["devices"][0]["capacity"]["cores"] = {"value": "1000"}
    body["spec"]["devices"][0]["allowMultipleAllocations"] = False
    created = resource_api.create_resource_slice(body)
    capacity = created.spec.devices[0].capacity
    assert (capacity["memory"].value, capacity["cores"].value) == ("1Gi", "1k")


def test_namespace_deletion_removes_its_content(
    core_api: client.CoreV1Api, resource_api: client.ResourceV1Api
) -> None:
    """Deleting a namespace empties it (namespace controller), then removes it; default stays."""
    core_api.create_namespace({"metadata": {"name": "team"}})
    resource_api.create_namespaced_resource_claim("team", claim("c1", namespace="team"))
    core_api.delete_namespace("team")
    assert resource_api.list_namespaced_resource_claim("team").items == []
    with pytest.raises(ApiException) as gone:
        core_api.read_namespace("team")
    assert gone.value.status == 404
    with pytest.raises(ApiException) as refused:
        core_api.delete_namespace("default")
    assert refused.value.status == 403


def test_dry_run_does_not_persist(resource_api: client.ResourceV1Api) -> None:
    """dryRun=All validates and answers the object but stores nothing."""
    answered = resource_api.create_namespaced_resource_claim("default", claim("c1"), dry_run="All")
    assert answered.metadata.name == "c1"
    assert resource_api.list_namespaced_resource_claim("default").items == []


def test_leases_and_events(api_client: client.ApiClient) -> None:
    """Leases (coordination.k8s.io/v1) and both Event APIs take the writes our components make."""
    leases = client.CoordinationV1Api(api_client)
    lease = leases.create_namespaced_lease(
        "kube-system",
        {"metadata": {"name": "l1"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}},
    )
    lease.spec.holder_identity = "b"
    assert leases.replace_namespaced_lease("l1", "kube-system", lease).spec.holder_identity == "b"
    core = client.CoreV1Api(api_client)
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
            "reason": "Allocated",
            "message": "ok",
            "type": "Normal",
        },
    )
    events = client.EventsV1Api(api_client)
    events.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e2"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "gpushare.dra.dev/controller",
            "reportingInstance": "controller-0",
            "action": "Allocate",
            "reason": "Allocated",
            "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p1", "namespace": "default"},
        },
    )
    assert [e.metadata.name for e in core.list_namespaced_event("default").items] == ["e1"]
    assert [e.metadata.name for e in events.list_namespaced_event("default").items] == ["e2"]


def test_discovery_documents(api_client: client.ApiClient) -> None:
    """/version, /api, /apis and the group-version resource lists answer what clients probe."""
    version = client.VersionApi(api_client).get_code()
    assert (version.major, version.minor, version.git_version) == ("1", "36", "v1.36.0")
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert groups == {
        "events.k8s.io",
        "coordination.k8s.io",
        "policy",  # PodDisruptionBudgets, for the eviction subresource
        "resource.k8s.io",
        "admissionregistration.k8s.io",
        DEFAULT_DRIVER_NAME,  # GpuShareQuota, the chart's CRD
    }
    resources = client.ResourceV1Api(api_client).get_api_resources()
    by_name = {r.name: r for r in resources.resources}
    assert by_name["resourceclaims"].namespaced is True
    assert by_name["resourceslices"].namespaced is False
    assert by_name["resourceclaims/status"].verbs == ["get", "patch", "update"]
    core = {r.name: r for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert core["pods/binding"].kind == "Binding"
    assert core["pods"].short_names == ["po"]


def test_gpushare_quotas_are_served_with_a_status_subresource(api_client: client.ApiClient) -> None:
    """A GpuShareQuota is created (a status sent with it dropped), listed, its status apart."""
    group, version, plural = DEFAULT_DRIVER_NAME, "v1alpha1", "gpusharequotas"
    custom = client.CustomObjectsApi(api_client)
    served = {r.name: r for r in custom.get_api_resources(group, version).resources}
    assert served[plural].namespaced is True
    assert served[plural].kind == "GpuShareQuota"
    assert served[f"{plural}/status"].verbs == ["get", "patch", "update"]
    quota = {
        "apiVersion": f"{group}/{version}",
        "kind": "GpuShareQuota",
        "metadata": {"name": "team-a"},
        "spec": {"hard": {"cores": "150", "memory": "40Gi"}},
    }
    sent = {**quota, "status": {"claims": 5}}
    created = custom.create_namespaced_custom_object(group, version, "default", plural, sent)
    assert created["metadata"]["generation"] == 1
    assert "status" not in created  # as a real API server does: status is written apart
    listed = custom.list_cluster_custom_object(group, version, plural)
    assert [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in listed["items"]] == [
        ("default", "team-a")
    ]
    status = {"used": {"cores": "70", "memory": "10Gi", "cards": "0"}, "claims": 2}
    written = custom.patch_namespaced_custom_object_status(
        group, version, "default", plural, "team-a", {"spec": {"hard": {}}, "status": status}
    )
    assert written["status"] == status
    assert written["spec"] == quota["spec"]  # a status write leaves spec alone
    assert written["metadata"]["generation"] == 1
    ignored = custom.patch_namespaced_custom_object(
        group, version, "default", plural, "team-a", {"status": {"claims": 9}}
    )
    assert ignored["status"] == status  # and a write of the object leaves status alone


def test_direct_store_access(server: FakeApiServer) -> None:
    """Tests seed and inspect objects without HTTP; seeded status is kept; nothing is counted."""
    server.create(claim("c1") | {"status": {"allocation": allocation()}})
    seeded = server.get("resourceclaims", "default", "c1")
    assert seeded is not None
    assert seeded["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    server.patch("resourceclaims", "default", "c1", {"metadata": {"labels": {"a": "b"}}})
    assert [
        c["metadata"]["labels"] for c in server.list("resourceclaims", label_selector="a=b")
    ] == [{"a": "b"}]
    server.delete("resourceclaims", "default", "c1")
    assert server.get("resourceclaims", "default", "c1") is None
    assert sum(server.requests.values()) == 0


def test_request_counter_counts_by_verb_and_resource(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """server.requests counts every API request by (verb, resource incl. subresource)."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    resource_api.patch_namespaced_resource_claim_status("c1", "default", {"status": {}})
    resource_api.list_namespaced_resource_claim("default")
    assert server.requests[("create", "resourceclaims")] == 1
    assert server.requests[("patch", "resourceclaims/status")] == 1
    assert server.requests[("list", "resourceclaims")] == 1
    server.reset_requests()
    assert sum(server.requests.values()) == 0


def test_request_counter_counts_by_user_agent(server: FakeApiServer) -> None:
    """server.requests_by_agent tells clients apart by User-Agent; reset_requests zeroes it."""
    with server.api_client() as first, server.api_client() as second:
        first.user_agent = "controller/1"
        second.user_agent = "harness/1"
        client.ResourceV1Api(first).create_namespaced_resource_claim("default", claim("c1"))
        client.ResourceV1Api(first).list_namespaced_resource_claim("default")
        client.CoreV1Api(second).list_namespaced_pod("default")
    assert server.requests_by_agent == {"controller/1": 2, "harness/1": 1}
    server.reset_requests()
    assert sum(server.requests_by_agent.values()) == 0


def test_graceful_pod_deletion_waits_for_the_kubelet() -> None:
    """graceful_pod_deletion: a bound pod is only marked; a grace-0 delete (kubelet) removes it."""
    with FakeApiServer(graceful_pod_deletion=True) as server, server.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        core.create_namespaced_pod("default", pod("bound"))
        core.create_namespaced_pod("default", pod("pending"))
        server.bind("default", "bound", "n1")
        marked = core.delete_namespaced_pod("bound", "default")
        assert marked.metadata.deletion_grace_period_seconds == 30
        assert core.read_namespaced_pod("bound", "default").metadata.deletion_timestamp is not None
        core.delete_namespaced_pod("bound", "default", grace_period_seconds=0)
        core.delete_namespaced_pod("pending", "default")
        assert core.list_namespaced_pod("default").items == []
