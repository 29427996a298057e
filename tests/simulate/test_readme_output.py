"""The README's quick start shows what ``gpushare-dra simulate`` really prints."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from gpushare_simulator.settings import SimulateSettings
from simulate.kit import FullRun

ROOT = Path(__file__).resolve().parents[2]
# What differs from run to run: generated claim names, durations, and the order in which a
# simulated CUDA process saw changes that one monitor pass made together.
_VARIABLE = (
    (re.compile(r"-gpu-[a-z0-9]{5}\b"), "-gpu-XXXXX"),
    (re.compile(r"^(\S+ +(?:held|running|idle) {2,}.*? {2,})[a-zA-Z][a-zA-Z ,.0-9]* s$"), r"\1..."),
    (re.compile(r"\d+\.\d s\b"), "N s"),
)


def quick_start() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]


def shown_output() -> list[str]:
    block = re.search(r"```console\n\$ gpushare-dra simulate\n(.*?)```", quick_start(), re.DOTALL)
    assert block is not None, "the Quick start shows no output of gpushare-dra simulate"
    return block.group(1).splitlines()


def normalised(line: str) -> str:
    for pattern, replacement in _VARIABLE:
        line = pattern.sub(replacement, line)
    return line


def test_readme_shows_real_simulate_output(full_run: FullRun) -> None:
    """Every line the README shows appears, in that order, in a real run's output."""
    real = [normalised(line) for line in full_run.stdout.splitlines()]
    position = 0
    shown = [line for line in shown_output() if line != "..."]
    assert len(shown) > 40
    for line in shown:
        expected = normalised(line)
        assert expected in real[position:], f"README line not in the real output: {line!r}"
        position = real.index(expected, position) + 1


def test_readme_names_every_simulate_option() -> None:
    """Each flag of simulate is explained in the Quick start."""
    section = quick_start()
    for field in dataclasses.fields(SimulateSettings):
        flag = "-o json" if field.name == "output" else "--" + field.name.replace("_", "-")
        assert flag in section, flag
