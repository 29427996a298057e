"""hack/build-image.sh parses its arguments strictly and skips only when asked to.

No test here builds an image: that is `hack/build-image.sh --check`, which .ci/run runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from deploy.chartkit import ROOT

SCRIPT = ROOT / "hack" / "build-image.sh"
BASH = shutil.which("bash") or "/bin/bash"


def script_array(name: str) -> list[str]:
    match = re.search(rf"^readonly {name}=\(\n?(.*?)\n?\)$", SCRIPT.read_text(), re.M | re.S)
    assert match, f"hack/build-image.sh declares no array {name}"
    return match.group(1).split()


def run_script(
    *args: str, env: dict[str, str] | None = None, path: str = "/usr/bin:/bin"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={"PATH": path, **(env or {})},
        timeout=30,
        check=False,
    )


@pytest.fixture
def path_without_buildah(tmp_path: Path) -> str:
    """Return a PATH with only what the script needs before it looks for buildah."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "uname"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_script_is_executable_bash_that_parses() -> None:
    """The script is executable, has a bash shebang and passes `bash -n`."""
    assert SCRIPT.stat().st_mode & 0o111
    assert SCRIPT.read_text().startswith("#!/usr/bin/env bash\n")
    result = subprocess.run([BASH, "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_help_lists_every_option_and_exits_zero() -> None:
    """--help prints the usage with each option the parser accepts, on stdout, exit 0."""
    result = run_script("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: build-image.sh ")
    for option in ("--check", "--tag T", "--base IMAGE", "--refresh-base", "--help"):
        assert option in result.stdout


@pytest.mark.parametrize(
    ("args", "unknown"),
    [(("--chek",), "--chek"), (("--check", "extra"), "extra"), (("-t", "x"), "-t")],
)
def test_unknown_argument_is_refused_with_usage(args: tuple[str, ...], unknown: str) -> None:
    """An argument the script does not know exits 2, naming it, with the usage on stderr."""
    result = run_script(*args)
    assert result.returncode == 2
    assert f"unknown argument: {unknown}\n" in result.stderr
    assert "usage: build-image.sh" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("option", ["--tag", "--base"])
def test_option_without_value_is_refused(option: str) -> None:
    """--tag and --base need a value: alone they exit 2 and say so."""
    result = run_script("--check", option)
    assert result.returncode == 2
    assert f"{option} needs a value" in result.stderr


def test_skips_without_buildah_only_when_asked(path_without_buildah: str) -> None:
    """No buildah: exit 0 with "skipping image build: <why>" in skip mode, else fail with why."""
    skip = {"GPUSHARE_IMAGE_CHECK": "skip-if-unavailable"}
    skipped = run_script("--check", env=skip, path=path_without_buildah)
    assert skipped.returncode == 0, skipped.stderr
    assert re.fullmatch(r"skipping image build: \S.*\n", skipped.stdout)
    failed = run_script("--check", path=path_without_buildah)
    assert failed.returncode == 1
    assert "cannot build the image here: " in failed.stderr
    assert failed.stdout == ""


def test_unknown_check_mode_is_refused(path_without_buildah: str) -> None:
    """A GPUSHARE_IMAGE_CHECK other than skip-if-unavailable fails instead of skipping."""
    result = run_script("--check", env={"GPUSHARE_IMAGE_CHECK": "skip"}, path=path_without_buildah)
    assert result.returncode == 1
    assert "GPUSHARE_IMAGE_CHECK must be empty or skip-if-unavailable" in result.stderr


def test_check_forbids_what_the_main_distribution_must_not_ship() -> None:
    """--check forbids the simulator's code and dependencies, none of which the main wheel needs."""
    assert "gpushare_simulator" in script_array("ABSENT_MODULES")
    forbidden = set(script_array("ABSENT_DISTRIBUTIONS"))
    assert {"gpushare-dra-simulator", "kubernetes-validate", "jsonschema", "cryptography"} <= (
        forbidden
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0] for dep in project["dependencies"]}
    assert not required & forbidden


def test_ci_runs_the_image_check_in_skip_if_unavailable_mode() -> None:
    """.ci/run runs build-image.sh --check after the tests, in skip-if-unavailable mode."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    check = "GPUSHARE_IMAGE_CHECK=skip-if-unavailable ./hack/build-image.sh --check"
    assert check in lines
    assert lines.index("./hack/test.sh") < lines.index(check)
