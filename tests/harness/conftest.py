"""Fixtures for harness tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpushare_simulator.harness.controlplane import e2e_bin_dir as configured_bin_dir


@pytest.fixture
def e2e_bin_dir() -> Path | None:
    """Real control-plane binaries from GPUSHARE_E2E_BIN_DIR, or None for the fake server."""
    return configured_bin_dir()
