"""Shell completion for ``gpushare-dra``: a bash function built from the argument parser.

Each subcommand completes its flags, a flag with fixed choices (``-o table|json|yaml``)
completes them, and anything else falls back to file names. zsh runs the same function through
its ``bashcompinit`` layer. Built from the parser, so it never lags behind the flags.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Final

SHELLS: Final = ("bash", "zsh")
_FUNCTION: Final = "_gpushare_dra_complete"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    # argparse has no public way to list subcommands.
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _choices(action: argparse.Action) -> list[str]:
    """Return the values a flag takes, from argparse or from the ``{a,b}`` its help shows."""
    if action.choices:
        return [str(choice) for choice in action.choices]
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if metavar.startswith("{") and metavar.endswith("}"):
        return metavar[1:-1].split(",")
    return []


def _words(items: list[str]) -> str:
    return shlex.quote(" ".join(items))


def script(parser: argparse.ArgumentParser, shell: str, programs: tuple[str, ...]) -> str:
    """Return the completion script for ``shell``, registered for each of ``programs``."""
    if shell not in SHELLS:
        raise ValueError(f"shell must be one of {', '.join(SHELLS)}: {shell!r}")
    commands = _subparsers(parser)
    flag_cases, choice_cases = [], []
    for name, sub in sorted(commands.items()):
        options = sorted(o for a in sub._actions for o in a.option_strings)
        flag_cases.append(f"    {name}) words={_words(options)} ;;")
        for action in sub._actions:
            choices = _choices(action)
            for option in action.option_strings if choices else ():
                choice_cases.append(f"    {name}:{option}) words={_words(choices)} ;;")
    lines = []
    if shell == "zsh":
        lines += ["autoload -U +X bashcompinit && bashcompinit"]
    lines += [
        f"{_FUNCTION}() {{",
        '  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} words=""',
        "  if [[ $COMP_CWORD -eq 1 ]]; then",
        f'    COMPREPLY=($(compgen -W {_words(sorted(commands))} -- "$cur"))',
        "    return",
        "  fi",
        '  case "${COMP_WORDS[1]}:$prev" in',
        *choice_cases,
        "  esac",
        "  if [[ -z $words && $cur == -* ]]; then",
        '    case "${COMP_WORDS[1]}" in',
        *flag_cases,
        "    esac",
        "  fi",
        '  if [[ -n $words ]]; then COMPREPLY=($(compgen -W "$words" -- "$cur")); fi',
        "}",
        *(f"complete -o default -F {_FUNCTION} {program}" for program in programs),
    ]
    return "\n".join(lines) + "\n"
