"""Structured logging: configured once per process, context bound per component and request.

structlog renders exceptions with ``rich`` whenever ``rich`` can be imported, and importing it
(with ``pygments``) adds about 19 MB to a process; ``rich`` is installed as a dependency of
a dependency. Our logs are JSON in a cluster and plain text at a terminal, so structlog is
imported here first with ``rich`` hidden, and formats tracebacks as plain text. ``rich``
itself stays importable for whoever else wants it.
"""

import sys


def _import_structlog_without_rich() -> None:
    if "structlog" in sys.modules:
        return
    absent = "rich" not in sys.modules
    if absent:
        sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` fail
    try:
        import structlog  # noqa: F401, PLC0415 - imported here for its side effect alone
    finally:
        if absent:
            del sys.modules["rich"]


_import_structlog_without_rich()

from dra_driver.logging.context import bind, bound, carry, get_logger, pool_initializer  # noqa: E402
from dra_driver.logging.setup import LOG_LEVELS, LogFormat, configure_logging  # noqa: E402

__all__ = [
    "LOG_LEVELS",
    "LogFormat",
    "bind",
    "bound",
    "carry",
    "configure_logging",
    "get_logger",
    "pool_initializer",
]
