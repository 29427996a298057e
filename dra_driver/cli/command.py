"""What a subcommand is, for the built-in ones and for those other distributions add.

A distribution adds a subcommand by naming a :class:`Command` in the entry point group
``gpushare_dra.commands`` (the simulator adds ``simulate`` that way). The driver itself never
imports such a distribution: what is not installed simply is not offered.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from dra_driver.api import DriverNames
from dra_driver.cli.flags import settings_from_arguments

S = TypeVar("S")

ENTRY_POINT_GROUP: Final = "gpushare_dra.commands"
TOOL_ENV_PREFIX: Final = "GPUSHARE_"
"""Prefix of the environment variables of the tools run at a shell (``plan``, ``status``…)."""


@dataclasses.dataclass(frozen=True)
class Invocation:
    """A parsed command line plus the environment its settings fall back to."""

    command: str
    namespace: argparse.Namespace
    environ: Mapping[str, str]
    names: DriverNames
    env_prefix: str = ""

    def settings(self, settings_class: type[S]) -> S:
        """Resolve one settings dataclass from flags, environment and defaults."""
        return settings_from_arguments(
            settings_class, self.namespace, self.environ, env_prefix=self.env_prefix
        )


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: its help, the settings it accepts and what it runs."""

    name: str
    help: str
    settings: tuple[type[Any], ...]
    run: Callable[[Invocation], int]
    env_prefix: str = ""
    """Prefix of the environment variables it reads: none for the components, whose chart
    sets them, ``GPUSHARE_`` for the tools run at a shell, which exports anything."""
