"""Metadata of gpushare-dra-simulator derived from the driver's source tree."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

ROOT = Path(__file__).resolve().parent.parent


def driver_version() -> str:
    """``__version__`` of ``dra_driver/__init__.py``: the one place the version is written."""
    module = ast.parse((ROOT / "dra_driver" / "__init__.py").read_text())
    for node in module.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    message = "dra_driver/__init__.py sets no __version__ string"
    raise RuntimeError(message)


def simulator_requirements() -> list[str]:
    """Return the ``simulator`` dependency group of the main pyproject.toml (one list for both)."""
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]
    return [str(requirement) for requirement in groups["simulator"]]


class CustomMetadataHook(MetadataHookInterface):
    """Version = the driver's; dependencies = that exact driver plus the simulator group."""

    def update(self, metadata: dict[str, Any]) -> None:
        """Fill in the two dynamic fields."""
        version = driver_version()
        metadata["version"] = version
        metadata["dependencies"] = [f"gpushare-dra-driver=={version}", *simulator_requirements()]
