"""The fake API server answers the shared API behaviours as kube-apiserver v1.36.2 does."""

from __future__ import annotations

import pytest
from gpushare_simulator.harness.kubeapply import Applier
from harness.apiserver.semantics import CASES, EXPECTED
from kubernetes import client


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fake_answers_as_kube_apiserver(api_client: client.ApiClient, name: str) -> None:
    """Each case's answer from the fake equals the real server's recorded answer."""
    namespace = f"s-{name.replace('_', '-')}"[:63]
    Applier(api_client).create(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    )
    assert CASES[name](api_client, namespace) == EXPECTED[name]
