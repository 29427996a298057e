"""Every shell command in README.md and docs/ runs, or names flags that exist, or says why not.

A reader copies commands from the docs. Each one is matched to a rule: **run** it here (it needs
no cluster and is quick) and check its exit status; check that every ``--flag`` it uses is one
its program accepts (``flags``: long benchmarks, commands whose cluster is the point); or
**skip** it, with the reason. A command no rule matches fails the test, so a new one in the
docs is placed in one of the three.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```(sh|bash|console|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_PLACEHOLDER = re.compile(r"<[^>]+>")


@dataclasses.dataclass(frozen=True)
class Command:
    """One command as a reader would paste it, and the page it is on."""

    page: str
    text: str

    def __str__(self) -> str:
        return f"{self.page}: {self.text}"


def commands() -> list[Command]:
    """Return every command of the pages' shell blocks; ``$``-lines only in console blocks."""
    found = []
    for page in PAGES:
        for language, body in _BLOCK.findall(page.read_text()):
            pending = ""
            for raw in body.splitlines():
                if language == "console" and not raw.startswith("$ ") and not pending:
                    continue
                typed = raw.removeprefix("$ ").strip() if language == "console" else raw.strip()
                line = f"{pending} {typed}".strip() if pending else typed
                if line.endswith("\\"):
                    pending = line[:-1].strip()
                    continue
                pending = ""
                text = line.split("  #", 1)[0].strip()  # a comment after the command
                if text and not text.startswith("#"):
                    found.append(Command(page.relative_to(ROOT).as_posix(), text))
    return found


@dataclasses.dataclass(frozen=True)
class Rule:
    """What to do with the commands matching ``pattern``."""

    pattern: str
    action: str  # "run", "flags" or "skip"
    reason: str = ""
    status: int = 0
    """For ``run``: the exit status the page shows or implies."""


RULES = [
    Rule(r"^gpushare-dra plan --inventory qgpu-runbook ", "run"),
    Rule(r"^LOG_LEVEL=loud gpushare-dra kubelet-plugin$", "run", status=2),
    Rule(r"^gpushare-dra plan --inventory inventory\.yaml ", "flags", "needs the page's file"),
    Rule(
        r"^(GPUSHARE_\w+=\S+ )?gpushare-dra (simulate|status|cleanup|region)\b",
        "flags",
        "runs a simulation (tests/simulate) or needs a cluster or a node",
    ),
    Rule(r"^\.venv/bin/python hack/", "flags", "a benchmark or long run, minutes each"),
    Rule(r"^(GPUSHARE_\w+=\S+ )?\./hack/test\.sh\b", "skip", "the test suite itself"),
    Rule(r"^python3 -m venv \.venv && ", "skip", "the quick start, which CI runs (test_readme)"),
    Rule(r"^\(cd /tmp/old ", "skip", "needs a checkout of an older release"),
    Rule(r"^(helm|kubectl) ", "skip", "needs a cluster"),
]


def rule_of(command: Command) -> Rule:
    """Return the first rule matching the command; fail naming it when none does."""
    for rule in RULES:
        if re.search(rule.pattern, command.text):
            return rule
    pytest.fail(f"no rule for the documented command {command}: add one to RULES")


def _argv(text: str) -> tuple[dict[str, str], list[str]]:
    """Split a command into its leading VAR=value assignments and its arguments."""
    words = shlex.split(text)
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def _program(words: list[str]) -> list[str]:
    """Return the argv that runs the command's program from this checkout."""
    if words[0] == "gpushare-dra":
        return [sys.executable, "-m", "dra_driver", *words[1:]]
    if words[0].endswith("python"):
        return [sys.executable, *words[1:]]
    raise AssertionError(f"no program for {words}")


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | env
    return subprocess.run(
        argv, cwd=ROOT, env=environ, capture_output=True, text=True, check=False, timeout=120
    )


ALL = commands()


def test_the_pages_hold_commands_and_every_one_has_a_rule() -> None:
    """The docs' commands are found (so the parser works), and no command lacks a rule."""
    assert len(ALL) >= 30
    assert {rule_of(c).action for c in ALL} == {"run", "flags", "skip"}


@pytest.mark.parametrize("command", [c for c in ALL if rule_of(c).action == "run"], ids=str)
def test_a_runnable_command_exits_as_documented(command: Command) -> None:
    """A command that needs no cluster runs from this checkout with the page's exit status."""
    env, words = _argv(command.text)
    done = _run(_program(words), env)
    assert done.returncode == rule_of(command).status, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.parametrize("command", [c for c in ALL if rule_of(c).action == "flags"], ids=str)
def test_every_flag_of_a_documented_command_exists(command: Command) -> None:
    """Each --flag a page uses is listed in its program's --help."""
    _, words = _argv(_PLACEHOLDER.sub("x", command.text))
    usage = _help(tuple(words[:2]))  # the tool and its subcommand, or python and its script
    for flag in {w.split("=", 1)[0] for w in words if w.startswith("--")}:
        assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", usage), (flag, command)


@functools.cache
def _help(head: tuple[str, ...]) -> str:
    """Return the --help of a program once, however many documented commands use it."""
    done = _run([*_program(list(head)), "--help"], {})
    assert done.returncode == 0, done.stderr
    return done.stdout
