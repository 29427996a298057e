"""Suite-wide fixtures."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from realkube import MARKER, required

_skipped_real: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Note each real-plane test that skipped."""
    if report.skipped and MARKER in report.keywords:
        _skipped_real.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under CI with ../shared/k8s there, a skipped real-plane test fails the run."""
    if _skipped_real and required() and session.exitstatus == 0:
        print(f"\nreal-plane tests skipped under CI: {', '.join(_skipped_real)}")  # noqa: T201
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Undo any logging configuration a test made (e.g. through the CLI's main()).

    A test that configures logging onto pytest's capture stream would otherwise leave later
    tests, and their background threads, writing to a closed file.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root.handlers, root.level = handlers, level


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """Yield a short temporary directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
