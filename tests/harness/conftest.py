"""Fixtures for harness tests."""

from __future__ import annotations

import pytest
from gpushare_simulator.harness.kubebin import KubeBinaries
from realkube import opt_in


@pytest.fixture
def kube_binaries() -> KubeBinaries | None:
    """Real control-plane binaries where GPUSHARE_KUBE_BINARIES names them; else the fake."""
    return opt_in()
