"""Fixtures for harness tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.testing.controlplane import e2e_bin_dir as configured_bin_dir


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """Yield a short temporary directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def e2e_bin_dir() -> Path | None:
    """Real control-plane binaries from GPUSHARE_E2E_BIN_DIR, or None for the fake server."""
    return configured_bin_dir()
