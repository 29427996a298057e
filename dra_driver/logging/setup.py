"""One-time structlog configuration for every gpushare-dra process.

All output, ours and that of libraries logging through the standard library (the Kubernetes
client, urllib3, gRPC), goes through one processor chain and one renderer, so a cluster log
pipeline sees one JSON object per line and a developer at a terminal sees aligned text.
"""

from __future__ import annotations

import enum
import logging
import sys
from typing import Final, TextIO

import structlog
import structlog.tracebacks
from structlog.typing import Processor


class LogFormat(enum.StrEnum):
    """How log events are rendered."""

    AUTO = "auto"
    """JSON, unless the stream is a terminal: what both a Pod and a developer expect."""
    JSON = "json"
    CONSOLE = "console"


LOG_LEVELS: Final = ("debug", "info", "warning", "error")

# Libraries that are chatty at INFO/DEBUG about every HTTP request; their warnings still show.
# The client's leader election logs as "leaderelection", at INFO on every renewal (every
# retry period: 43,200 lines a day); our own leader module logs what changes.
_QUIET_LIBRARIES: Final = ("urllib3", "kubernetes", "asyncio", "leaderelection")


class _NamedPrintLogger(structlog.PrintLogger):
    """A PrintLogger that knows its name, so ``add_logger_name`` works for our events too."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


class _NamedPrintLoggerFactory:
    def __init__(self, file: TextIO) -> None:
        self._file = file

    def __call__(self, *args: object) -> _NamedPrintLogger:
        return _NamedPrintLogger(self._file, str(args[0]) if args else "")


def _renderer(fmt: LogFormat, stream: TextIO) -> Processor:
    use_json = fmt is LogFormat.JSON or (fmt is LogFormat.AUTO and not stream.isatty())
    if use_json:
        return structlog.processors.JSONRenderer(sort_keys=False)
    # ConsoleRenderer's default, with rich installed (typer brings it), prints every frame's local
    # variables; they hold pod specs, env values and tokens. A plain traceback never does.
    return structlog.dev.ConsoleRenderer(
        colors=stream.isatty(), exception_formatter=structlog.dev.plain_traceback
    )


def configure_logging(
    *, level: str = "info", fmt: LogFormat = LogFormat.AUTO, stream: TextIO | None = None
) -> None:
    """Configure structlog and the standard library logging for this process.

    Call once at start-up, before the first event is logged. ``level`` is one of
    :data:`LOG_LEVELS`; an unknown level raises ``ValueError`` naming the allowed values.
    """
    if level not in LOG_LEVELS:
        allowed = ", ".join(LOG_LEVELS)
        raise ValueError(f"log level {level!r} is not supported; allowed values: {allowed}")
    stream = stream if stream is not None else sys.stderr
    levelno = logging.getLevelNamesMapping()[level.upper()]
    renderer = _renderer(fmt, stream)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if isinstance(renderer, structlog.processors.JSONRenderer):
        # Tracebacks as structured frames: a multi-line string would break one-event-per-line.
        # Never with local variables: they hold pod specs, env values and tokens.
        shared.append(
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        )
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(levelno),
        logger_factory=_NamedPrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )

    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(levelno)
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(levelno, logging.WARNING))
