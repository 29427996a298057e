"""Fixtures shared by the client-side tests: one fake API server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """Serve a fresh in-process API server for the test."""
    with FakeApiServer() as srv:
        yield srv
