"""Admission: strict schema per Kubernetes release, DRA semantic rules, server-shaped errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import ApiError, FakeApiServer
from harness.apiserver.builders import SHARE_ID, allocation, claim, device, pod, raw, resource_slice
from kubernetes import client
from kubernetes.client.rest import ApiException

LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def refusal(call: Any, *args: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        call(*args)
    status: dict[str, Any] = json.loads(caught.value.body)
    assert status["code"] == caught.value.status
    return status


def causes(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["reason"]) for c in status["details"]["causes"]]


def test_slice_with_129_devices_is_refused(resource_api: client.ResourceV1Api) -> None:
    """More than 128 devices is 422 with exactly the server's message, reason and cause."""
    status = refusal(resource_api.create_resource_slice, resource_slice("s1", "n1", 129))
    assert status["message"] == (
        'ResourceSlice.resource.k8s.io "s1" is invalid: spec.devices: Too many: 129: '
        "must have at most 128 items"
    )
    assert status["reason"] == "Invalid"
    assert status["details"] == {
        "name": "s1",
        "group": "resource.k8s.io",
        "kind": "ResourceSlice",
        "causes": [
            {
                "reason": "FieldValueTooMany",
                "message": "Too many: 129: must have at most 128 items",
                "field": "spec.devices",
            }
        ],
    }


def test_bad_device_name_is_refused(resource_api: client.ResourceV1Api) -> None:
    """A device name that is not a DNS label is 422 with the server's full message."""
    body = resource_slice("s1", "n1", 1)
    body["spec"]["devices"][0]["name"] = "GPU_0"
    status = refusal(resource_api.create_resource_slice, body)
    assert status["message"] == (
        'ResourceSlice.resource.k8s.io "s1" is invalid: spec.devices[0].name: Invalid value: '
        f'"GPU_0": {LABEL_RULE}'
    )


def test_tainted_slices_hold_at_most_64_devices(resource_api: client.ResourceV1Api) -> None:
    """From 1.35 a slice with a tainted device may hold 64 devices, not 128."""
    body = resource_slice("s1", "n1", 65)
    body["spec"]["devices"][0]["taints"] = [{"key": "a.io/broken", "effect": "NoSchedule"}]
    status = refusal(resource_api.create_resource_slice, body)
    assert status["details"]["causes"][0]["message"] == "Too many: 65: must have at most 64 items"


def test_several_errors_are_aggregated(resource_api: client.ResourceV1Api) -> None:
    """All field errors come in one 422: '[a, b]' in the message and one cause each."""
    body = resource_slice("s1", "n1", 2, allNodes=True)
    body["spec"]["devices"][1]["name"] = "gpu-0"
    body["spec"]["pool"]["resourceSliceCount"] = 0
    status = refusal(resource_api.create_resource_slice, body)
    assert status["message"].startswith('ResourceSlice.resource.k8s.io "s1" is invalid: [')
    assert causes(status) == [
        ("spec.pool.resourceSliceCount", "FieldValueInvalid"),
        ("spec", "FieldValueInvalid"),
        ("spec.devices[1].name", "FieldValueDuplicate"),
    ]
    assert (
        "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
        in (status["message"])
    )


def test_device_attribute_and_capacity_rules(resource_api: client.ResourceV1Api) -> None:
    """String attributes ≤ 64, versions are semver, one value each; requestPolicy needs sharing."""
    bad = device(0)
    bad["attributes"] = {
        "long": {"string": "x" * 65},
        "ver": {"version": "1.0"},
        "two": {"int": 1, "bool": True},
    }
    bad["allowMultipleAllocations"] = False
    body = resource_slice("s1", "n1", 0)
    body["spec"]["devices"] = [bad]
    status = refusal(resource_api.create_resource_slice, body)
    assert causes(status) == [
        ("spec.devices[0].attributes[long].string", "FieldValueTooLong"),
        ("spec.devices[0].attributes[ver].version", "FieldValueInvalid"),
        ("spec.devices[0].attributes[two]", "FieldValueInvalid"),
        ("spec.devices[0].capacity[cores].requestPolicy", "FieldValueForbidden"),
    ]


def test_request_policy_needs_a_default(resource_api: client.ResourceV1Api) -> None:
    """A validRange without a default is 422 on requestPolicy.default."""
    body = resource_slice("s1", "n1", 1)
    del body["spec"]["devices"][0]["capacity"]["cores"]["requestPolicy"]["default"]
    status = refusal(resource_api.create_resource_slice, body)
    assert causes(status) == [
        ("spec.devices[0].capacity[cores].requestPolicy.default", "FieldValueRequired")
    ]


def test_unknown_field_is_a_strict_decoding_error(api_client: client.ApiClient) -> None:
    """An unknown field is refused like kubectl's strict validation: 400 naming the field."""
    body = claim("c1")
    body["spec"]["devices"]["requests"][0]["exactly"]["colour"] = "blue"
    code, status, _ = raw(api_client, "POST", CLAIMS, body)
    assert code == 400
    assert status["message"] == (
        'ResourceClaim in version "v1" cannot be handled as a ResourceClaim: strict decoding '
        'error: unknown field "spec.devices.requests[0].exactly.colour"'
    )


def test_field_validation_ignore_and_warn_drop_unknown_fields(api_client: client.ApiClient) -> None:
    """fieldValidation=Ignore drops unknown fields; Warn also answers a Warning header."""
    body = claim("c1")
    body["spec"]["extra"] = 1
    code, created, _ = raw(api_client, "POST", CLAIMS + "?fieldValidation=Ignore", body)
    assert code == 201
    assert "extra" not in created["spec"]
    body["metadata"]["name"] = "c2"
    code, _, headers = raw(api_client, "POST", CLAIMS + "?fieldValidation=Warn", body)
    assert code == 201
    assert headers["Warning"] == '299 - "unknown field \\"spec.extra\\""'


def test_schema_follows_the_emulated_release() -> None:
    """spec.skipNodeOperations exists in the 1.37 schema only: refused as unknown on 1.34."""
    body = resource_slice("s1", "n1", 1, skipNodeOperations=["*"])
    gates = {"DRAOptionalNodeOperations": True}
    with FakeApiServer("1.37", feature_gates=gates) as new, new.api_client() as api_client:
        created = client.ResourceV1Api(api_client).create_resource_slice(body)
        assert created.spec.skip_node_operations == ["*"]
        assert client.VersionApi(api_client).get_code().minor == "37"
    with FakeApiServer("1.34") as old, old.api_client() as api_client:
        code, status, _ = raw(api_client, "POST", "/apis/resource.k8s.io/v1/resourceslices", body)
        assert code == 400
        assert 'unknown field "spec.skipNodeOperations"' in status["message"]


def test_disabled_gate_fields_are_dropped_silently() -> None:
    """An alpha field (gate off by default) is accepted and dropped, like the real server does."""
    body = resource_slice("s1", "n1", 1, skipNodeOperations=["*"])
    with FakeApiServer("1.37") as server:
        created = server.create(body)
        assert "skipNodeOperations" not in created["spec"]


def test_consumable_capacity_is_dropped_before_1_36() -> None:
    """On 1.35 sharing fields vanish from slices and claims unless the gate is turned on."""
    shared_claim = claim("c1")
    with FakeApiServer("1.35") as server:
        device_out = server.create(resource_slice("s1", "n1", 1))["spec"]["devices"][0]
        assert "allowMultipleAllocations" not in device_out
        assert "requestPolicy" not in device_out["capacity"]["cores"]
        request = server.create(shared_claim)["spec"]["devices"]["requests"][0]["exactly"]
        assert "capacity" not in request
    with FakeApiServer("1.35", feature_gates={"DRAConsumableCapacity": True}) as server:
        device_out = server.create(resource_slice("s1", "n1", 1))["spec"]["devices"][0]
        assert device_out["allowMultipleAllocations"] is True
    with FakeApiServer("1.36") as server:
        request = server.create(shared_claim)["spec"]["devices"]["requests"][0]["exactly"]
        assert request["capacity"] == {"requests": {"cores": "30", "memory": "5Gi"}}


def test_claim_request_rules(resource_api: client.ResourceV1Api) -> None:
    """Request names are unique DNS labels; exactly one of exactly/firstAvailable; ≤ 32 requests."""
    body = claim("c1")
    request = body["spec"]["devices"]["requests"][0]
    both = {
        **request,
        "name": "Bad_Name",
        "firstAvailable": [{"name": "a", "deviceClassName": "x"}],
    }
    body["spec"]["devices"]["requests"] = [request, dict(request), both]
    status = refusal(resource_api.create_namespaced_resource_claim, "default", body)
    assert causes(status) == [
        ("spec.devices.requests[2].name", "FieldValueInvalid"),
        ("spec.devices.requests[2]", "FieldValueInvalid"),
        ("spec.devices.requests[1].name", "FieldValueDuplicate"),
    ]
    many = claim("c2")
    many["spec"]["devices"]["requests"] = [{**request, "name": f"r{i}"} for i in range(33)]
    status = refusal(resource_api.create_namespaced_resource_claim, "default", many)
    assert status["details"]["causes"][0]["message"] == "Too many: 33: must have at most 32 items"


def test_opaque_parameters_must_be_a_small_object(api_client: client.ApiClient) -> None:
    """Config parameters must be a JSON object of at most 10 KiB (the server's two checks)."""
    body = claim("c1")
    config = {"requests": ["gpu"], "opaque": {"driver": "gpushare.dra.dev", "parameters": ["x"]}}
    body["spec"]["devices"]["config"] = [config]
    code, status, _ = raw(api_client, "POST", CLAIMS, body)
    assert code == 422
    assert status["details"]["causes"][0]["message"] == (
        'Invalid value: "<value omitted>": must be a valid JSON object'
    )
    config["opaque"]["parameters"] = {"blob": "x" * 10240}
    code, status, _ = raw(api_client, "POST", CLAIMS, body)
    assert (code, causes(status)) == (
        422,
        [("spec.devices.config[0].opaque.parameters", "FieldValueTooLong")],
    )


def test_allocation_result_rules(resource_api: client.ResourceV1Api) -> None:
    """Results must name a spec request, shareID is a UUID, config source is FromClass/FromClaim."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    bad = allocation()
    result = bad["devices"]["results"][0]
    result.update({"request": "other", "shareID": "not-a-uuid"})
    bad["devices"]["config"] = [
        {"source": "FromNowhere", "opaque": {"driver": "gpushare.dra.dev", "parameters": {}}}
    ]
    status = refusal(
        resource_api.patch_namespaced_resource_claim_status,
        "c1",
        "default",
        {"status": {"allocation": bad}},
    )
    assert causes(status) == [
        ("status.allocation.devices.results[0].request", "FieldValueInvalid"),
        ("status.allocation.devices.results[0].shareID", "FieldValueInvalid"),
        ("status.allocation.devices.config[0].source", "FieldValueNotSupported"),
    ]
    assert SHARE_ID not in json.dumps(status)


def test_device_status_must_name_an_allocated_device(resource_api: client.ResourceV1Api) -> None:
    """status.devices entries must match an allocated (driver, pool, device, shareID)."""
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    entry = {"driver": "gpushare.dra.dev", "pool": "n1", "device": "gpu-0", "shareID": SHARE_ID}
    ok = resource_api.patch_namespaced_resource_claim_status(
        "c1", "default", {"status": {"allocation": allocation(), "devices": [entry]}}
    )
    assert ok.status.devices[0].share_id == SHARE_ID
    wrong = {**entry, "device": "gpu-7"}
    status = refusal(
        resource_api.replace_namespaced_resource_claim_status,
        "c1",
        "default",
        {**ok.to_dict(serialize=True), "status": {"allocation": allocation(), "devices": [wrong]}},
    )
    assert status["details"]["causes"][0]["message"].endswith(
        "must be an allocated device in the claim"
    )


def test_metadata_rules(resource_api: client.ResourceV1Api, core_api: client.CoreV1Api) -> None:
    """Names are DNS subdomains (namespaces labels); labels are qualified names and values."""
    status = refusal(resource_api.create_namespaced_resource_claim, "default", claim("Bad.Name"))
    assert causes(status) == [("metadata.name", "FieldValueInvalid")]
    status = refusal(
        resource_api.create_namespaced_resource_claim, "default", claim("c1", labels={"a b": "c d"})
    )
    assert causes(status) == [("metadata.labels", "FieldValueInvalid")] * 2
    status = refusal(core_api.create_namespace, {"metadata": {"name": "a.b"}})
    assert (
        status["details"]["causes"][0]["message"] == 'Invalid value: "a.b": must not contain dots'
    )


def test_pod_claim_references(core_api: client.CoreV1Api) -> None:
    """A container may only use claims the pod declares; a pod claim names a claim or template."""
    body = pod("p1", resourceClaims=[{"name": "gpu"}])
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "other"}]}
    status = refusal(core_api.create_namespaced_pod, "default", body)
    assert causes(status) == [
        ("spec.resourceClaims[0]", "FieldValueRequired"),
        ("spec.containers[0].resources.claims[0].name", "FieldValueNotSupported"),
    ]


def test_create_with_resource_version_is_an_internal_error(api_client: client.ApiClient) -> None:
    """Like etcd3 storage, a create carrying metadata.resourceVersion fails (500)."""
    body = claim("c1")
    body["metadata"]["resourceVersion"] = "5"
    code, status, _ = raw(api_client, "POST", CLAIMS, body)
    assert code == 500
    assert status["message"] == (
        "Internal error occurred: resourceVersion should not be set on objects to be created"
    )


@pytest.fixture
def lenient() -> Iterator[FakeApiServer]:
    with FakeApiServer(validate=False) as running:
        yield running


def test_validation_can_be_switched_off(lenient: FakeApiServer) -> None:
    """validate=False stores what the schema and rules would refuse (for fault-tolerance tests)."""
    created = lenient.create(resource_slice("s1", "n1", 129))
    assert len(created["spec"]["devices"]) == 129


def test_direct_access_raises_api_errors(server: FakeApiServer) -> None:
    """The direct API refuses invalid objects with the same ApiError (status, reason)."""
    with pytest.raises(ApiError) as caught:
        server.create(resource_slice("s1", "n1", 129))
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")
