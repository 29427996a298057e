"""`gpushare-dra completion bash|zsh`: the script bash runs completes commands, flags, values."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from dra_driver.cli.main import main


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Return what `gpushare-dra completion SHELL` prints."""
    assert main(["completion", shell], environ={}) == 0
    return capsys.readouterr().out


def _complete(script: str, *words: str) -> list[str]:
    """Source ``script`` in bash and return what it completes for the command line ``words``."""
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}\n"
        '_gpushare_dra_complete; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, "--norc", "--noprofile"], input=program, capture_output=True, text=True,
        check=True, timeout=30,
    )  # fmt: skip
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completes_commands_flags_and_flag_values(capsys: pytest.CaptureFixture[str]) -> None:
    """`pl` gives plan; `plan --inv` gives --inventory; `plan -o ` gives the three formats."""
    script = _script("bash", capsys)
    assert _complete(script, "gpushare-dra", "pl") == ["plan"]
    assert _complete(script, "gpushare-dra", "plan", "--inv") == ["--inventory"]
    assert _complete(script, "gpushare-dra", "plan", "-o", "") == ["table", "json", "yaml"]
    assert _complete(script, "gpushare-dra", "status", "--con") == ["--context"]
    assert "complete -o default -F _gpushare_dra_complete kubectl-gpushare" in script


def test_zsh_gets_the_same_function_through_bashcompinit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """zsh loads bashcompinit first, then the same function and registrations."""
    bash, zsh = _script("bash", capsys), _script("zsh", capsys)
    assert zsh == "autoload -U +X bashcompinit && bashcompinit\n" + bash


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """fish is not offered: exit 2 naming the allowed shells."""
    assert main(["completion", "fish"], environ={}) == 2
    assert "allowed values: bash, zsh" in capsys.readouterr().err
