"""Fixtures for the fake API server tests: a running server and clients bound to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as running:
        yield running
        assert running.internal_errors == []


@pytest.fixture
def api_client(server: FakeApiServer) -> Iterator[client.ApiClient]:
    with server.api_client() as api:
        yield api


@pytest.fixture
def resource_api(api_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client)


@pytest.fixture
def core_api(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)
