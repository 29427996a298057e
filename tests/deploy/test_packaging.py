"""The two distributions: the driver without the simulator, and the simulator beside it."""

from __future__ import annotations

import email.parser
import functools
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from dra_driver import __version__
from dra_driver.cli import main as cli_main
from dra_driver.cli.command import ENTRY_POINT_GROUP
from dra_driver.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SIMULATOR_DEPENDENCIES = {"kubernetes-validate", "jsonschema", "cryptography"}


@functools.cache
def _wheels(directory: str) -> dict[str, Path]:
    """Build both wheels once (no build isolation: hatchling comes from the test tools)."""
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--wheel-dir", directory, str(ROOT), str(ROOT / "simulator")),
        ],
        check=True,
        capture_output=True,
        timeout=110,
    )
    built = {path.name.split("-")[0]: path for path in Path(directory).glob("*.whl")}
    assert set(built) == {"gpushare_dra_driver", "gpushare_dra_simulator"}
    return built


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both wheels of this checkout."""
    return _wheels(str(tmp_path_factory.mktemp("wheels")))


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def _requirement_names(metadata: email.message.Message) -> set[str]:
    requirements = metadata.get_all("Requires-Dist") or []
    return {re.split(r"[;<>=!~ ]", requirement, maxsplit=1)[0] for requirement in requirements}


def test_driver_wheel_holds_no_simulator_code_and_no_simulator_dependency(
    wheels: dict[str, Path],
) -> None:
    """The components' wheel holds dra_driver alone: no simulator, harness or their deps."""
    names = _names(wheels["gpushare_dra_driver"])
    assert {name.split("/")[0] for name in names if "dist-info" not in name} == {"dra_driver"}
    assert "dra_driver/cli/main.py" in names
    # What the components read at run time is in: the built-in inventories and the stubs.
    assert "dra_driver/nvml/inventories/qgpu-runbook.yaml" in names
    assert "dra_driver/_proto/dra/v1/api_pb2.py" in names
    assert not _requirement_names(_metadata(wheels["gpushare_dra_driver"])) & SIMULATOR_DEPENDENCIES


def test_simulator_wheel_carries_the_harness_examples_and_its_dependencies(
    wheels: dict[str, Path],
) -> None:
    """The simulator wheel has the harness, `simulate`, the examples, and the pinned driver."""
    names = set(_names(wheels["gpushare_dra_simulator"]))
    assert {
        "gpushare_simulator/harness/__init__.py",
        "gpushare_simulator/simulate/command.py",
    } <= names
    examples = {path.name for path in (ROOT / "deploy" / "examples").glob("*.yaml")}
    assert {f"gpushare_simulator/simulate/examples/{name}" for name in examples} <= names
    # Nothing of the driver's own modules: the two wheels never install the same file.
    assert {n.split("/")[0] for n in names if "dist-info" not in n} == {"gpushare_simulator"}
    metadata = _metadata(wheels["gpushare_dra_simulator"])
    assert metadata["Version"] == __version__
    requirements = set(metadata.get_all("Requires-Dist") or [])
    assert f"gpushare-dra-driver=={__version__}" in requirements
    group = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["simulator"]
    assert set(group) <= requirements
    assert _requirement_names(metadata) == SIMULATOR_DEPENDENCIES | {"gpushare-dra-driver"}


def test_simulator_wheel_adds_simulate_to_the_cli_by_entry_point(wheels: dict[str, Path]) -> None:
    """`gpushare-dra simulate` reaches the simulator through its wheel's entry point alone."""
    with zipfile.ZipFile(wheels["gpushare_dra_simulator"]) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
        text = archive.read(name).decode()
    assert f"[{ENTRY_POINT_GROUP}]\nsimulate = gpushare_simulator.cli:SIMULATE" in text


def test_simulate_without_the_simulator_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the simulator's entry point, `simulate` exits 1 naming the install command."""
    monkeypatch.setattr(cli_main.metadata, "entry_points", lambda **_: [])
    assert main(["simulate"]) == 1
    error = capsys.readouterr().err
    assert "`simulate` needs the simulator" in error
    assert "pip install . ./simulator" in error
