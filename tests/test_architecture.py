"""Architecture rules of the codebase, checked so they cannot erode silently."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dra_driver"
SIMULATOR = ROOT / "simulator" / "gpushare_simulator"
MAX_MODULE_LINES = 400


def source_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_proto" not in p.relative_to(PACKAGE).parts)


def hand_written_modules() -> list[Path]:
    """Return the driver's modules and the simulator's."""
    return [*source_modules(), *sorted(SIMULATOR.rglob("*.py"))]


def test_import_layering_contracts_hold(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """api imports nothing of ours, components never import each other, shared code stays down."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    types = sorted(c["type"] for c in contracts["contracts"])
    assert types == ["forbidden", "forbidden", "forbidden", "forbidden", "independence"]
    monkeypatch.chdir(ROOT)
    exit_code = lint_imports(no_cache=True, no_logo=True)
    output = capsys.readouterr().out
    assert exit_code == 0, output
    assert "0 broken" in output


COMPONENTS = ("controller", "kubeletplugin", "webhook")
ENTRY_POINTS = frozenset(
    f"dra_driver.{module}"
    for module in (
        "controller.app",
        "controller.settings",
        "kubeletplugin.plugin",
        "kubeletplugin.settings",
        "webhook.run",
        "webhook.settings",
    )
)
"""What the simulator may import of a component: how to start it, and its settings."""


def _imported(path: Path) -> set[str]:
    """Return the modules ``path`` imports (a ``from X import Y`` may import module X.Y)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_simulator_starts_components_without_reaching_into_them() -> None:
    """The simulator imports a component's entry point and settings, none of its internals."""
    reached = sorted(
        f"{path.relative_to(ROOT)}: {module}"
        for path in SIMULATOR.rglob("*.py")
        for module in _imported(path)
        if module.split(".")[:2] in (["dra_driver", c] for c in COMPONENTS)
        and len(module.split(".")) > 2
        and ".".join(module.split(".")[:3]) not in ENTRY_POINTS
    )
    assert reached == []


@pytest.mark.parametrize("module", hand_written_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(module: Path) -> None:
    """Every hand-written module stays under the line budget, so each has one responsibility."""
    lines = len(module.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines; split it by responsibility"


def test_default_driver_name_is_spelled_in_one_place() -> None:
    """The literal default driver name appears in exactly one module; all else derives from it."""
    holders = [p for p in source_modules() if '"gpushare.dra.dev"' in p.read_text()]
    assert [p.relative_to(ROOT).as_posix() for p in holders] == ["dra_driver/api/driver.py"]


def test_no_component_sends_a_claim_or_pod_back_whole() -> None:
    """Claims and pods are written by patch: a PUT re-serializes what the server compares."""
    whole = re.compile(r"\breplace_namespaced_(resource_claim|pod)\w*")
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in source_modules()
        for match in whole.finditer(path.read_text())
    ]
    assert found == []


def test_every_test_states_what_it_proves() -> None:
    """Each test function in the suite has a docstring saying what it proves."""
    missing = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name.startswith("test_")
                and ast.get_docstring(node) is None
            ):
                missing.append(f"{path.relative_to(ROOT)}::{node.name}")
    assert missing == []
