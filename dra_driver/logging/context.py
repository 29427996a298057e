"""Bound logging context: who is logging (component, node, driver) and about what (claim)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import structlog
from structlog.typing import FilteringBoundLogger


def get_logger(name: str) -> FilteringBoundLogger:
    """Return a logger whose events carry ``logger=<name>``, usually the module's ``__name__``."""
    logger: FilteringBoundLogger = structlog.get_logger(name)
    return logger


def bind(**values: object) -> None:
    """Bind values to every later event of this thread or task (process-wide identity).

    Components call this once at start-up, e.g. ``bind(component="controller",
    driver=names.driver)``.
    """
    structlog.contextvars.bind_contextvars(**values)


@contextlib.contextmanager
def bound(**values: object) -> Iterator[None]:
    """Bind values for the duration of one request, e.g. ``claim_uid`` for one prepare call.

    Values bound before the block are restored afterwards, so nested requests and reused
    worker threads never leak one claim's identity into another's events.
    """
    with structlog.contextvars.bound_contextvars(**values):
        yield
