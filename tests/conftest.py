"""Suite-wide fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


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
