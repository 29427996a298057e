"""Bound logging context: who is logging (component, node, driver) and about what (claim)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator

import structlog
from structlog.typing import FilteringBoundLogger


def get_logger(name: str) -> FilteringBoundLogger:
    """Return a logger whose events carry ``logger=<name>``, usually the module's ``__name__``."""
    logger: FilteringBoundLogger = structlog.get_logger(name)
    return logger


def bind(**values: object) -> None:
    """Bind values to every later event of this thread or task, and of the threads it starts.

    Components call this once at start-up, e.g. ``bind(component="controller",
    driver=names.driver)``; threads started through :func:`carry` or with
    :func:`pool_initializer` inherit what is bound when they are created.
    """
    structlog.contextvars.bind_contextvars(**values)


def carry(target: Callable[..., None]) -> Callable[..., None]:
    """Return ``target`` to run in a copy of this thread's logging context.

    A new thread starts with an empty context, so without this its events would lack the
    component, driver and node bound at start-up. One copy per thread: a context runs in one
    thread at a time.
    """
    return functools.partial(contextvars.copy_context().run, target)


def pool_initializer() -> Callable[[], None]:
    """Return a thread-pool ``initializer`` giving each worker this thread's bound values."""
    values = structlog.contextvars.get_contextvars()

    def initialize() -> None:
        structlog.contextvars.bind_contextvars(**values)

    return initialize


@contextlib.contextmanager
def bound(**values: object) -> Iterator[None]:
    """Bind values for the duration of one request, e.g. ``claim_uid`` for one prepare call.

    Values bound before the block are restored afterwards, so nested requests and reused
    worker threads never leak one claim's identity into another's events.
    """
    with structlog.contextvars.bound_contextvars(**values):
        yield
