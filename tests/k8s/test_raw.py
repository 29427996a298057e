"""raw.get: a read by path, with the same errors as the generated methods."""

from __future__ import annotations

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.errors import NotFoundError


def test_get_reads_an_object_and_maps_a_missing_one_to_not_found(server: FakeApiServer) -> None:
    """A path with parameters returns the stored object; a 404 is NotFoundError."""
    api_client = server.api_client()
    created = raw.call(
        client.CoreV1Api(api_client).create_namespace,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    )
    read = raw.get(api_client, "/api/v1/namespaces/{name}", name="team-a")
    assert read["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(NotFoundError):
        raw.get(api_client, "/api/v1/namespaces/{name}", name="team-b")
    assert raw.get(api_client, "/version/")["gitVersion"]
