"""Structured logging: configured once per process, context bound per component and request."""

from dra_driver.logging.context import bind, bound, carry, get_logger, pool_initializer
from dra_driver.logging.setup import LOG_LEVELS, LogFormat, configure_logging

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
