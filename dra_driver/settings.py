"""Settings shared by every component, and the ``flag`` field helper all settings use.

Settings are frozen dataclasses (one per component, kopf style): every field has a default
and help text, and the command line is generated from them, so each field is reachable both
as ``--kebab-case`` flag and as an ``UPPER_SNAKE_CASE`` environment variable.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Final, TypeVar

import yaml

from dra_driver.api.driver import DEFAULT_DRIVER_NAME
from dra_driver.logging import LOG_LEVELS, LogFormat

HELP: Final = "help"
CHOICES: Final = "choices"
SHORT: Final = "short"
POSITIONAL: Final = "positional"
STANDARD_ENV: Final = "standard_env"

T = TypeVar("T")


class InvalidSettingError(ValueError):
    """A settings field holds a value no component can run with; raised by ``__post_init__``."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field_name = field_name
        self.problem = problem


def flag(
    default: T,
    help: str,
    *,
    choices: Sequence[str] | None = None,
    short: str | None = None,
    positional: bool = False,
    standard_env: bool = False,
) -> T:
    """Declare a settings field: default, help text, allowed values, optional short flag.

    A ``positional`` field is a command-line argument (a file to read, say) and reads no
    environment variable. A ``standard_env`` field reads the variable every tool reads
    (``KUBECONFIG``), never a prefixed one.
    """
    metadata: dict[str, object] = {HELP: help}
    if choices is not None:
        metadata[CHOICES] = tuple(choices)
    if short is not None:
        metadata[SHORT] = short
    if positional:
        metadata[POSITIONAL] = True
    if standard_env:
        metadata[STANDARD_ENV] = True
    return dataclasses.field(default=default, metadata=metadata)


def kubeconfig_flag(help: str) -> str | None:
    """Declare a ``--kubeconfig`` field: unset by default, and read from ``KUBECONFIG``.

    The variable is the one kubectl and every client reads, never a prefixed one, so a shell
    that works with kubectl works with each command here too.
    """
    return flag(None, help, standard_env=True)


@dataclasses.dataclass(frozen=True)
class CommonSettings:
    """Settings every subcommand accepts."""

    driver_name: str = flag(
        DEFAULT_DRIVER_NAME,
        "DRA driver name; the config API group, finalizer, scheduling gate, CDI kind and "
        "DeviceClass names all derive from it",
    )
    log_level: str = flag("info", "minimum level of log events", choices=LOG_LEVELS)
    log_format: LogFormat = flag(
        LogFormat.AUTO, "log rendering: json, console, or auto (console only on a terminal)"
    )


OUTPUT_FORMATS: Final = ("table", "json", "yaml")
"""What ``-o`` takes in every tool: ``table`` for people, the same document as JSON or YAML."""


def output_flag() -> str:
    """Declare a tool's ``-o/--output`` field: the same three choices everywhere."""
    return flag(
        "table",
        "output format: table (for people), or the same document as json or yaml",
        choices=OUTPUT_FORMATS,
        short="-o",
    )


def as_document(document: object, output: str) -> str:
    """Render a report's document in ``output``, ``json`` or ``yaml``."""
    if output == "yaml":
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True).rstrip("\n")
    return json.dumps(document, indent=2)


@dataclasses.dataclass(frozen=True)
class CompletionSettings:
    """Shell completion."""

    shell: str = flag("bash", "the shell to complete in", choices=("bash", "zsh"), positional=True)


@dataclasses.dataclass(frozen=True)
class OutputSettings:
    """Output of reporting commands."""

    output: str = output_flag()
