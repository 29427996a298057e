"""The README's quick start is the contract for a fresh machine: CI must run exactly it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:sh|bash|console)?\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the Quick start section has no fenced code block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_has_exactly_two_commands() -> None:
    """The Quick start block holds two commands: run the simulator, run the tests."""
    commands = quick_start_commands()
    assert len(commands) == 2
    assert "gpushare-dra simulate" in commands[0]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    """.ci/run executes the README's second quick-start command, character for character."""
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert quick_start_commands()[1] in ci_lines
