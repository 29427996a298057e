"""How the fake finds, compacts and re-encodes opaque ``parameters`` text, as Go would."""

from __future__ import annotations

import json

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from gpushare_simulator.harness.apiserver.rawjson import compact, encode, find, go_float
from harness.apiserver.builders import DRIVER, SHARE_ID, allocation, claim, send, with_config
from harness.apiserver.test_apiserver_rawext import CLAIMS, UNSORTED
from kubernetes import client
from kubernetes.client.rest import ApiException

CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def test_find_returns_exact_value_text_and_last_duplicate() -> None:
    """Value spans are exact (inner whitespace kept) and a repeated key's last value counts."""
    text = '{"s": {"c": [ {"p" : {"b": 1,\n "a": [1, 2]}}, {"p":{}, "p": {"z":0}} ]}, "x": "p"}'
    found = find(text, [("s", "c", "*", "p")])
    assert found == {("s", "c", 0, "p"): '{"b": 1,\n "a": [1, 2]}', ("s", "c", 1, "p"): '{"z":0}'}


def test_compact_drops_whitespace_and_escapes_html() -> None:
    """Compacting keeps order and escapes, removes whitespace and escapes <, >, & as Go does."""
    assert compact('{"b": "x <y> & \\" z",  "a" : [1, 2]}') == (
        r'{"b":"x \u003cy\u003e \u0026 \" z","a":[1,2]}'
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.5, "0.5"),
        (1e21, "1e+21"),
        (1.5e-7, "1.5e-7"),
        (1e20, "100000000000000000000"),
    ],
)
def test_go_float_matches_encoding_json(value: float, text: str) -> None:
    """Floats are written as Go's encoding/json writes a float64."""
    assert go_float(value) == text


def test_encode_sorts_maps_like_go() -> None:
    """Go writes maps with sorted keys; numbers that went through a float64 lose their ``.0``."""
    value = {"b": [1.0, "<"], "a": {"d": 1, "c": 2}}
    assert encode(value, sort_keys=True, go_numbers=True) == (
        r'{"a":{"c":2,"d":1},"b":[1,"\u003c"]}'
    )
    assert encode(value, sort_keys=False, go_numbers=False) == (
        r'{"b":[1.0,"\u003c"],"a":{"d":1,"c":2}}'
    )


def test_json_patch_of_parameters_keeps_the_operation_text(server: FakeApiServer) -> None:
    """A JSON patch setting parameters stores its text: the same values reordered are a change."""
    obj = with_config(claim("c1"), UNSORTED)
    assert send(server, "POST", CLAIMS, json.dumps(obj, separators=(",", ":")).encode())[0] == 201
    path = "/spec/devices/config/0/opaque/parameters"
    same_order = json.dumps([{"op": "replace", "path": path, "value": UNSORTED}]).encode()
    other_order = json.dumps(
        [{"op": "replace", "path": path, "value": {"a": UNSORTED["a"], "b": 1}}]
    )
    json_patch = "application/json-patch+json"
    assert send(server, "PATCH", f"{CLAIMS}/c1", same_order, json_patch)[0] == 200
    code, text = send(server, "PATCH", f"{CLAIMS}/c1", other_order.encode(), json_patch)
    assert code == 422
    assert "field is immutable" in text


@pytest.mark.parametrize(
    ("content_type", "patch", "shown"),
    [
        (
            "application/merge-patch+json",
            {
                "spec": {
                    "config": [{"opaque": {"driver": DRIVER, "parameters": {"z": 1.0, "y": 0}}}]
                }
            },
            '{"y":0,"z":1.0}',
        ),
        (
            "application/strategic-merge-patch+json",
            {"metadata": {"labels": {"a": "b"}}},
            '{"a":{"x":3,"y":2},"b":1}',
        ),
    ],
)
def test_device_class_patches_re_encode_what_they_decode(
    server: FakeApiServer, content_type: str, patch: dict[str, object], shown: str
) -> None:
    """A merge patch's new parameters and any strategic merge patch store keys sorted."""
    cls = {"metadata": {"name": "gpu"}, "spec": {}}
    cls["spec"]["config"] = [{"opaque": {"driver": DRIVER, "parameters": UNSORTED}}]
    assert send(server, "POST", CLASSES, json.dumps(cls, separators=(",", ":")).encode())[0] == 201
    code, text = send(server, "PATCH", f"{CLASSES}/gpu", json.dumps(patch).encode(), content_type)
    assert code == 200
    assert f'"parameters":{shown}' in text


def test_dry_run_answers_with_the_bytes_it_would_store(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """A dry-run create shows the parameters compacted in sent order, and stores nothing."""
    obj = with_config(claim("c1"), UNSORTED)
    code, text = send(server, "POST", f"{CLAIMS}?dryRun=All", json.dumps(obj).encode())
    assert code == 201
    assert '"parameters":{"b":1,"a":{"y":2,"x":3}}' in text
    with pytest.raises(ApiException) as caught:
        resource_api.read_namespaced_resource_claim("c1", "default")
    assert caught.value.status == 404


def test_device_status_data_keeps_its_bytes(server: FakeApiServer) -> None:
    """status.devices[].data is a RawExtension too: its text is kept (``1e3`` stays ``1e3``)."""
    obj = claim("c1")
    assert send(server, "POST", CLAIMS, json.dumps(obj).encode())[0] == 201
    stored = json.loads(send(server, "GET", f"{CLAIMS}/c1")[1])
    device = {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "shareID": SHARE_ID}
    data = {"b": 1, "n": "N"}
    stored["status"] = {"allocation": allocation(), "devices": [{**device, "data": data}]}
    sent = json.dumps(stored).replace('"n": "N"', '"n":  1e3')
    code, text = send(server, "PUT", f"{CLAIMS}/c1/status", sent.encode())
    assert code == 200, text
    assert '"data":{"b":1,"n":1e3}' in send(server, "GET", f"{CLAIMS}/c1")[1]
