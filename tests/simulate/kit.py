"""Shared by the simulation's tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)


def simulation_dirs() -> set[Path]:
    """Return the temporary directories of simulations that exist now."""
    return set(Path("/tmp").glob("gpushare-simulate-*"))


@dataclasses.dataclass(frozen=True)
class FullRun:
    """A finished ``gpushare-dra simulate --scenario all`` process."""

    returncode: int
    stdout: str
    stderr: str
    leftovers: set[Path]
    """Temporary directories of the simulation that exist after it and did not before."""
