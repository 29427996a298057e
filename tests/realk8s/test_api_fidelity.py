"""The fake API server's tests of API behaviour, run against the real one where they apply.

The write matrix the fake is held to (tests/harness/apiserver/rawcases.py) is what kube-apiserver
answers: each row is sent here exactly as there, the claim created from raw JSON bytes. So are
the shared API behaviours of tests/harness/apiserver/semantics.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from harness.apiserver.builders import claim, with_config
from harness.apiserver.rawcases import FINALIZER, MATRIX, SORTED, UNSORTED, read, write
from harness.apiserver.semantics import CASES, EXPECTED
from kubernetes import client
from kubernetes.client.rest import ApiException

from realk8s.kit import Cluster, fresh_namespace, wait_for


@pytest.fixture(scope="module")
def shared(cluster: Cluster) -> Iterator[str]:
    """Yield one namespace for every row (a namespace's deletion costs seconds); checked after."""
    with fresh_namespace(cluster) as name:
        yield name


def _create(cluster: Cluster, namespace: str, name: str, style: str) -> None:
    """Create claim ``name`` from the bytes a Go client (compact) or the Python client sends."""
    parameters = SORTED if style == "sorted-compact" else UNSORTED
    obj = with_config(claim(name, namespace), parameters)
    # Not a GpuShareConfig: the chart's webhooks skip objects labelled so.
    obj["metadata"]["labels"] = {"gpushare.dra.dev/webhook": "disabled"}
    separators = (",", ":") if style.endswith("compact") else (", ", ": ")
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    cluster.kubectl("create", "--raw", path, "-f", "-",
                    stdin=json.dumps(obj, separators=separators))  # fmt: skip


@pytest.mark.parametrize(("style", "how", "accepted"), MATRIX)
def test_the_fakes_claim_write_matrix_is_what_kube_apiserver_answers(
    cluster: Cluster, shared: str, style: str, how: str, accepted: bool
) -> None:
    """Each creation style and write type is accepted, or refused as immutable, as in the fake."""
    namespace, name = shared, f"{style}-{how}"
    _create(cluster, namespace, name, style)
    resource = client.ResourceV1Api(cluster.api)
    if not accepted:
        with pytest.raises(ApiException) as caught:
            write(resource, name, how, namespace)
        assert caught.value.status == 422
        assert json.loads(caught.value.body)["message"].endswith(": field is immutable")
        return
    write(resource, name, how, namespace)
    stored = read(resource, name, namespace)
    assert stored["metadata"]["finalizers"] == [FINALIZER]
    # Let the namespace go: the finalizer off again, by a write this claim takes.
    stored["metadata"]["finalizers"] = []
    if how == "put":
        resource.replace_namespaced_resource_claim(name, namespace, stored)
    else:
        patch = [{"op": "remove", "path": "/metadata/finalizers"}]
        resource.patch_namespaced_resource_claim(name, namespace, patch)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_shared_api_behaviours_are_what_kube_apiserver_answers(
    cluster: Cluster, name: str
) -> None:
    """Each behaviour the fake is held to (harness/apiserver/semantics.py) holds here too."""
    with fresh_namespace(cluster) as namespace:
        core = client.CoreV1Api(cluster.api)
        # kube-apiserver refuses pods until kube-controller-manager made the default SA.
        wait_for(
            lambda: any(
                sa.metadata.name == "default"
                for sa in core.list_namespaced_service_account(namespace).items
            ),
            f"the default ServiceAccount of {namespace}",
        )
        assert CASES[name](cluster.api, namespace) == EXPECTED[name]
