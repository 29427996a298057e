"""Opaque ``parameters`` keep the bytes they were sent in, as a real v1.36 API server keeps them.

The write matrix below is what a real v1.36.2 server answered; the other tests pin how the
fake stores, shows and compares those bytes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from harness.apiserver.builders import DRIVER, allocation, claim, send, with_config
from harness.apiserver.rawcases import FINALIZER, MATRIX, SORTED, UNSORTED, read, write
from kubernetes import client
from kubernetes.client.rest import ApiException

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
MERGE = "application/merge-patch+json"
RESERVED = {"resource": "pods", "name": "p", "uid": "u1"}


def allocated(parameters: object) -> dict[str, Any]:
    value = allocation()
    opaque = {"driver": DRIVER, "parameters": parameters}
    value["devices"]["config"] = [{"source": "FromClaim", "requests": ["gpu"], "opaque": opaque}]
    return value


def create_claim(server: FakeApiServer, name: str, style: str) -> None:
    """Create a claim as a Go client (compact) or the Python client (spaced) sends it."""
    parameters = SORTED if style == "sorted-compact" else UNSORTED
    obj = with_config(claim(name), parameters)
    separators = (",", ":") if style.endswith("compact") else (", ", ": ")
    code, text = send(server, "POST", CLAIMS, json.dumps(obj, separators=separators).encode())
    assert code == 201, text


@pytest.mark.parametrize(("style", "how", "accepted"), MATRIX)
def test_claim_writes_answer_as_a_real_server(
    server: FakeApiServer, resource_api: client.ResourceV1Api, style: str, how: str, accepted: bool
) -> None:
    """Each creation style and write type is accepted or refused as immutable as on v1.36.2."""
    create_claim(server, "c1", style)
    if accepted:
        write(resource_api, "c1", how)
        assert read(resource_api, "c1")["metadata"]["finalizers"] == [FINALIZER]
        return
    with pytest.raises(ApiException) as caught:
        write(resource_api, "c1", how)
    assert caught.value.status == 422
    status = json.loads(caught.value.body)
    assert status["message"].startswith(
        'ResourceClaim.resource.k8s.io "c1" is invalid: spec: Invalid value: '
    )
    assert status["message"].endswith(": field is immutable")
    assert [c["field"] for c in status["details"]["causes"]] == ["spec"]


def test_reads_show_stored_bytes_compacted_in_sent_order(server: FakeApiServer) -> None:
    """GET, LIST, WATCH and the create answer show the parameters compacted, key order kept."""
    sent = (
        b'{"metadata": {"name": "c1"}, "spec": {"devices": {"requests": [{"name": "gpu",'
        b' "exactly": {"deviceClassName": "x"}}], "config": [{"requests": ["gpu"], "opaque":'
        b' {"driver": "d.io", "parameters": {"b" : 1,\n "a":  [2, {"d": 1, "c": 0}]}}}]}}}'
    )
    shown = '"parameters":{"b":1,"a":[2,{"d":1,"c":0}]}'
    code, text = send(server, "POST", CLAIMS, sent)
    assert code == 201
    assert shown in text
    assert shown in send(server, "GET", f"{CLAIMS}/c1")[1]
    assert shown in send(server, "GET", CLAIMS)[1]
    watch = f"{CLAIMS}?watch=true&resourceVersion=0&timeoutSeconds=1"
    assert shown in send(server, "GET", watch)[1]


def test_yaml_body_stores_parameters_with_sorted_keys(server: FakeApiServer) -> None:
    """A YAML body is converted to JSON with sorted keys first: that is what gets stored."""
    sent = b"""
metadata: {name: c1}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: x}}]
    config:
    - requests: [gpu]
      opaque:
        driver: d.io
        parameters: {b: 1, a: {y: 2, x: 1.0}}
"""
    code, _ = send(server, "POST", CLAIMS, sent, content_type="application/yaml")
    assert code == 201
    assert '"parameters":{"a":{"x":1,"y":2},"b":1}' in send(server, "GET", f"{CLAIMS}/c1")[1]


def test_status_write_with_allocation_in_other_bytes_is_refused(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """Once set, status.allocation compares byte for byte: the Python client's PUT is refused."""
    create_claim(server, "c1", "spaced")
    body = read(resource_api, "c1")
    body["status"] = {"allocation": allocated(UNSORTED)}
    compact = json.dumps(body, separators=(",", ":")).encode()
    assert send(server, "PUT", f"{CLAIMS}/c1/status", compact)[0] == 200
    again = read(resource_api, "c1")
    with pytest.raises(ApiException) as caught:
        resource_api.replace_namespaced_resource_claim_status("c1", "default", again)
    assert caught.value.status == 422
    causes = json.loads(caught.value.body)["details"]["causes"]
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueInvalid", "status.allocation")
    ]
    assert causes[0]["message"].endswith("field is immutable")
    reserve = {"op": "add", "path": "/status/reservedFor", "value": [RESERVED]}
    patched = resource_api.patch_namespaced_resource_claim_status("c1", "default", [reserve])
    assert patched.status.reserved_for[0].uid == "u1"


def test_status_write_ignores_the_spec_bytes_it_carries(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """A status write keeps the stored spec bytes, so a later JSON patch of the claim works."""
    create_claim(server, "c1", "unsorted-compact")
    body = read(resource_api, "c1")
    body["status"] = {"allocation": allocation()}
    resource_api.replace_namespaced_resource_claim_status("c1", "default", body)
    assert '"parameters":{"b":1,"a":{"y":2,"x":3}}' in send(server, "GET", f"{CLAIMS}/c1")[1]
    write(resource_api, "c1", "json")


def test_json_patch_stores_an_operation_value_compacted_in_its_order(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """An allocation added by JSON patch keeps its operation's key order, compacted."""
    create_claim(server, "c1", "unsorted-compact")
    operation = {"op": "add", "path": "/status/allocation", "value": allocated(UNSORTED)}
    resource_api.patch_namespaced_resource_claim_status("c1", "default", [operation])
    text = send(server, "GET", f"{CLAIMS}/c1")[1]
    assert text.count('"parameters":{"b":1,"a":{"y":2,"x":3}}') == 2
    merge = {"status": {"reservedFor": [RESERVED]}}
    resource_api.patch_namespaced_resource_claim_status("c1", "default", merge, _content_type=MERGE)


def test_template_spec_compares_bytes(server: FakeApiServer) -> None:
    """A template's spec is immutable byte for byte: the same values spaced are a change."""
    path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates"
    template = {"metadata": {"name": "t1"}, "spec": {"spec": claim("x")["spec"]}}
    with_config(template["spec"], UNSORTED)
    assert (
        send(server, "POST", path, json.dumps(template, separators=(",", ":")).encode())[0] == 201
    )
    stored = json.loads(send(server, "GET", f"{path}/t1")[1])
    code, text = send(server, "PUT", f"{path}/t1", json.dumps(stored).encode())
    assert code == 422
    assert "spec: Invalid value: " in text
    compact = json.dumps(stored, separators=(",", ":")).encode()
    assert send(server, "PUT", f"{path}/t1", compact)[0] == 200


def test_device_class_takes_new_bytes_and_a_new_generation(server: FakeApiServer) -> None:
    """A DeviceClass spec may change: new bytes are stored, bump generation; equal bytes do not."""
    path = "/apis/resource.k8s.io/v1/deviceclasses"
    cls = {"metadata": {"name": "gpu"}, "spec": {}}
    cls["spec"]["config"] = [{"opaque": {"driver": DRIVER, "parameters": UNSORTED}}]
    assert send(server, "POST", path, json.dumps(cls, separators=(",", ":")).encode())[0] == 201
    stored = json.loads(send(server, "GET", f"{path}/gpu")[1])
    _, same = send(server, "PUT", f"{path}/gpu", json.dumps(stored, separators=(",", ":")).encode())
    assert json.loads(same)["metadata"] == stored["metadata"]
    code, text = send(server, "PUT", f"{path}/gpu", json.dumps(stored, indent=1).encode())
    assert code == 200
    updated = json.loads(text)["metadata"]
    assert updated["generation"] == 2
    assert updated["resourceVersion"] != stored["metadata"]["resourceVersion"]


def test_html_characters_are_escaped_when_shown(server: FakeApiServer) -> None:
    """Go escapes <, > and & when it writes kept bytes out, as unicode escapes."""
    obj = with_config(claim("c1"), {"q": "a<b>&c"})
    assert send(server, "POST", CLAIMS, json.dumps(obj, separators=(",", ":")).encode())[0] == 201
    assert r'"parameters":{"q":"a\u003cb\u003e\u0026c"}' in send(server, "GET", f"{CLAIMS}/c1")[1]
