"""API behaviours the driver relies on, each written once and run against both servers.

Every case takes an admin API client and a namespace of its own, creates what it needs as
YAML (as users do) and returns what the server answered, reduced to what the driver depends
on: a status code, a field's value, a list of names. ``EXPECTED`` is what kube-apiserver
v1.36.2 answers; ``tests/harness/apiserver/test_apiserver_semantics.py`` holds the fake to it
and ``tests/realk8s/test_api_fidelity.py`` the real server.

Pods are pinned to a node that does not exist, so nothing schedules or runs them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gpushare_simulator.harness.kubeapply import Applier
from harness.apiserver.rawcases import MERGE
from kubernetes import client

Object = dict[str, Any]
NOWHERE = "no-such-node"


def _pod(name: str, *, labels: dict[str, str] | None = None, gates: tuple[str, ...] = ()) -> Object:
    spec: Object = {
        "nodeSelector": {"kubernetes.io/hostname": NOWHERE},
        "containers": [{"name": "c", "image": "busybox"}],
    }
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def _claim(name: str, *, labels: dict[str, str] | None = None) -> Object:
    request = {"name": "gpu", "exactly": {"deviceClassName": "semantics.example.com"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        # Not ours: the chart's webhooks, where installed, leave objects labelled so alone.
        "metadata": {
            "name": name,
            "labels": {"gpushare.dra.dev/webhook": "disabled", **(labels or {})},
        },
        "spec": {"devices": {"requests": [request]}},
    }


def _status(call: Callable[[], object]) -> int:
    """Return 200 when ``call`` succeeds, else the status code it failed with."""
    try:
        call()
    except client.ApiException as exc:
        return int(exc.status)
    return 200


def _read_claim(api: client.ApiClient, namespace: str, name: str) -> Object:
    response = client.ResourceV1Api(api).read_namespaced_resource_claim(
        name, namespace, _preload_content=False
    )
    body: Object = json.loads(response.data)
    return body


def stale_resource_version(api: client.ApiClient, namespace: str) -> object:
    """Send a merge patch at a resourceVersion older than the stored one: 409."""
    Applier(api).create([_claim("stale")], namespace)
    old = _read_claim(api, namespace, "stale")["metadata"]["resourceVersion"]
    resource = client.ResourceV1Api(api)
    resource.patch_namespaced_resource_claim(
        "stale", namespace, {"metadata": {"labels": {"v": "2"}}}, _content_type=MERGE
    )
    patch = {"metadata": {"resourceVersion": old, "labels": {"v": "3"}}}
    return _status(
        lambda: resource.patch_namespaced_resource_claim(
            "stale", namespace, patch, _content_type=MERGE
        )
    )


def finalizer_holds_a_deleted_object(api: client.ApiClient, namespace: str) -> object:
    """Delete a claim with a finalizer: marked, then gone once the finalizer is removed."""
    held = _claim("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    Applier(api).create([held], namespace)
    resource = client.ResourceV1Api(api)
    resource.delete_namespaced_resource_claim("held", namespace)
    marked = bool(_read_claim(api, namespace, "held")["metadata"].get("deletionTimestamp"))
    release = [{"op": "remove", "path": "/metadata/finalizers"}]
    resource.patch_namespaced_resource_claim("held", namespace, release)
    gone = _status(lambda: _read_claim(api, namespace, "held")) == 404
    return [marked, gone]


def failed_json_patch_test(api: client.ApiClient, namespace: str) -> object:
    """Send a JSON patch whose ``test`` fails: refused (422), nothing changed."""
    Applier(api).create([_claim("tested", labels={"v": "1"})], namespace)
    patch = [
        {"op": "test", "path": "/metadata/labels/v", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/v", "value": "3"},
    ]
    code = _status(
        lambda: client.ResourceV1Api(api).patch_namespaced_resource_claim(
            "tested", namespace, patch
        )
    )
    return [code, _read_claim(api, namespace, "tested")["metadata"]["labels"]["v"]]


def merge_patch_null_deletes_a_key(api: client.ApiClient, namespace: str) -> object:
    """Merge-patch a label to ``null``: that key goes, the others stay."""
    Applier(api).create([_claim("nulled", labels={"a": "1", "b": "2"})], namespace)
    patch = {"metadata": {"labels": {"a": None}}}
    client.ResourceV1Api(api).patch_namespaced_resource_claim(
        "nulled", namespace, patch, _content_type=MERGE
    )
    labels = _read_claim(api, namespace, "nulled")["metadata"]["labels"]
    return sorted(labels)


def claim_spec_is_immutable(api: client.ApiClient, namespace: str) -> object:
    """Change a claim's spec after creation: refused (422)."""
    Applier(api).create([_claim("fixed")], namespace)
    patch = {"spec": {"devices": {"requests": [{"name": "other", "exactly": {
        "deviceClassName": "semantics.example.com"}}]}}}  # fmt: skip
    return _status(
        lambda: client.ResourceV1Api(api).patch_namespaced_resource_claim(
            "fixed", namespace, patch, _content_type=MERGE
        )
    )


def status_ignores_metadata_labels(api: client.ApiClient, namespace: str) -> object:
    """Send a label to the status subresource (not stored), then to the claim (stored)."""
    Applier(api).create([_claim("sub")], namespace)
    resource = client.ResourceV1Api(api)
    patch = {"metadata": {"labels": {"via": "status"}}}
    resource.patch_namespaced_resource_claim_status("sub", namespace, patch, _content_type=MERGE)
    after_status = _read_claim(api, namespace, "sub")["metadata"]["labels"].get("via")
    resource.patch_namespaced_resource_claim("sub", namespace, patch, _content_type=MERGE)
    after_main = _read_claim(api, namespace, "sub")["metadata"]["labels"].get("via")
    return [after_status, after_main]


def gates_cannot_be_added(api: client.ApiClient, namespace: str) -> object:
    """Add a scheduling gate to a created pod (422), then remove one (200)."""
    Applier(api).create([_pod("gated", gates=("example.com/a",))], namespace)
    core = client.CoreV1Api(api)
    add = [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "example.com/b"}}]
    remove = [{"op": "remove", "path": "/spec/schedulingGates/0"}]
    return [
        _status(lambda: core.patch_namespaced_pod("gated", namespace, add)),
        _status(lambda: core.patch_namespaced_pod("gated", namespace, remove)),
    ]


def field_and_label_selectors(api: client.ApiClient, namespace: str) -> object:
    """Pods by ``spec.nodeName`` (the unbound ones match ``""``), claims by label."""
    Applier(api).create(
        [_pod("p1", labels={"tier": "a"}), _pod("p2"), _claim("c1", labels={"tier": "a"})],
        namespace,
    )
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)

    def names(response: Any) -> list[str]:
        return sorted(item["metadata"]["name"] for item in json.loads(response.data)["items"])

    unbound = core.list_namespaced_pod(
        namespace, field_selector="spec.nodeName=", _preload_content=False
    )
    labelled = core.list_namespaced_pod(namespace, label_selector="tier=a", _preload_content=False)
    claims = resource.list_namespaced_resource_claim(
        namespace, label_selector="tier=a", _preload_content=False
    )
    return [names(unbound), names(labelled), names(claims)]


def generate_name_adds_a_suffix(api: client.ApiClient, namespace: str) -> object:
    """``generateName`` gives the prefix plus five characters."""
    claim = _claim("")
    del claim["metadata"]["name"]
    claim["metadata"]["generateName"] = "gen-"
    created = Applier(api).create([claim], namespace)[0]
    name = str(created["metadata"]["name"])
    return [name.startswith("gen-"), len(name) - len("gen-")]


CASES: dict[str, Callable[[client.ApiClient, str], object]] = {
    case.__name__: case
    for case in (
        stale_resource_version,
        finalizer_holds_a_deleted_object,
        failed_json_patch_test,
        merge_patch_null_deletes_a_key,
        claim_spec_is_immutable,
        status_ignores_metadata_labels,
        gates_cannot_be_added,
        field_and_label_selectors,
        generate_name_adds_a_suffix,
    )
}

EXPECTED: dict[str, object] = {
    "stale_resource_version": 409,
    "finalizer_holds_a_deleted_object": [True, True],
    "failed_json_patch_test": [422, "1"],
    "merge_patch_null_deletes_a_key": ["b", "gpushare.dra.dev/webhook"],
    "claim_spec_is_immutable": 422,
    "status_ignores_metadata_labels": [None, "status"],
    "gates_cannot_be_added": [422, 200],
    "field_and_label_selectors": [["p1", "p2"], ["p1"], ["c1"]],
    "generate_name_adds_a_suffix": [True, 5],
}
