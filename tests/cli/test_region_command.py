"""``gpushare-dra region``: an operator decodes a region file, and nothing hostile is followed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hamicore.golden import golden_file, golden_values

from dra_driver.cli.main import main


@pytest.fixture
def region(tmp_path: Path) -> Path:
    return golden_file(tmp_path / "gpu.cache")


def test_json_output_is_the_golden_regions_known_values(
    region: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o json prints exactly what HAMi-core's layout wrote into the golden region."""
    assert main(["region", str(region), "-o", "json"], environ={}) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = golden_values()
    assert {key: printed[key] for key in expected} == expected


def test_text_output_shows_cards_processes_and_state(
    region: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table names each card's limits, each process's use per card, and what it may do."""
    assert main(["region", str(region)], environ={}) == 0
    text = capsys.readouterr().out
    assert "region version 1.2, 2 card(s), 3 process(es)" in text
    assert "priority:    1 (offline)" in text
    assert "GPU-4b56cb71-7424-5684-9f9d-6b522f839e9e  5Gi           40%" in text
    assert "2     102   40002     1     6960Mi       31%" in text
    assert "running, launched kernels lately; SM limit enforced" in text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_text("not a region"), "too short for a region header"),
        (lambda p: p.symlink_to("/etc/hostname"), "Too many levels of symbolic links"),
        (os.mkfifo, "is not a regular file"),
        (lambda _: None, "No such file or directory"),
    ],
    ids=["foreign", "symlink", "fifo", "missing"],
)
def test_what_is_not_a_region_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, message: str
) -> None:
    """A foreign file, a symlink, a FIFO or nothing at all: exit 2, the file and why."""
    path = tmp_path / "x.cache"
    make(path)  # type: ignore[operator]
    assert main(["region", str(path)], environ={}) == 2
    err = capsys.readouterr().err
    assert f"gpushare-dra region: error: {path}" in err
    assert message in err


def test_the_file_argument_reads_no_environment_variable(
    region: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """FILE set in the shell does not stand in for the argument."""
    assert main(["region"], environ={"FILE": str(region)}) == 2
    assert "give the region FILE" in capsys.readouterr().err
