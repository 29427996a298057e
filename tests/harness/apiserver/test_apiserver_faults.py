"""Fault injection: errors, lost responses, dropped connections and delays on chosen requests."""

from __future__ import annotations

import time

import pytest
import urllib3
from gpushare_simulator.harness.apiserver import FakeApiServer
from harness.apiserver.builders import claim
from kubernetes import client
from kubernetes.client.rest import ApiException


def test_injected_errors_fire_on_matching_requests_only(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """A fault with times=1 fails the first matching request with its status, then goes quiet."""
    fault = server.faults.inject(verb="create", resource="resourceclaims", status=503, times=1)
    with pytest.raises(ApiException) as caught:
        resource_api.create_namespaced_resource_claim("default", claim("c1"))
    assert caught.value.status == 503
    assert caught.value.headers["Retry-After"] == "1"
    assert server.get("resourceclaims", "default", "c1") is None
    resource_api.create_namespaced_resource_claim("default", claim("c1"))
    resource_api.list_namespaced_resource_claim("default")
    assert fault.hits == 1


def test_conflict_fault_speaks_like_the_server(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """A 409 fault on claims/status is the real Conflict Status, so retry logic can be exercised."""
    server.create(claim("c1"))
    server.faults.inject(verb="patch", resource="resourceclaims/status", status=409)
    with pytest.raises(ApiException) as caught:
        resource_api.patch_namespaced_resource_claim_status("c1", "default", {"status": {}})
    assert "the object has been modified" in caught.value.body
    server.faults.clear()
    resource_api.patch_namespaced_resource_claim_status("c1", "default", {"status": {}})


def test_after_fault_applies_the_write_but_loses_the_answer(
    server: FakeApiServer, resource_api: client.ResourceV1Api
) -> None:
    """after=True runs the request and then fails its response: the object exists anyway."""
    server.faults.inject(verb="create", status=500, after=True, times=1)
    with pytest.raises(ApiException) as caught:
        resource_api.create_namespaced_resource_claim("default", claim("c1"))
    assert caught.value.status == 500
    assert server.get("resourceclaims", "default", "c1") is not None


def test_dropped_connection_and_delay(server: FakeApiServer) -> None:
    """drop=True closes the connection without an answer; delay slows the matching request."""
    http = urllib3.PoolManager(retries=False)
    url = f"{server.url}/apis/resource.k8s.io/v1/resourceclaims"
    dropped = server.faults.inject(verb="list", drop=True, times=1)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        http.request("GET", url)
    assert dropped.hits == 1
    slow = server.faults.inject(
        verb="list", delay=0.3, when=lambda request: request.namespace is None
    )
    started = time.monotonic()
    assert http.request("GET", url).status == 200
    assert time.monotonic() - started >= 0.3
    slow.remove()
    http.clear()


def test_probabilistic_fault_is_reproducible(server: FakeApiServer) -> None:
    """probability with a seed fails the same fraction of requests on every run."""
    http = urllib3.PoolManager(retries=False)
    url = f"{server.url}/api/v1/namespaces"
    pattern = []
    for _ in range(2):
        fault = server.faults.inject(verb="list", status=500, probability=0.5, seed=7)
        pattern.append([http.request("GET", url).status for _ in range(20)])
        fault.remove()
    assert pattern[0] == pattern[1]
    assert 0 < pattern[0].count(500) < 20
    http.clear()
