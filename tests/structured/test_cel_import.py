"""Evaluating selectors does not load the cel package's shell, nor structlog's rich."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_PROGRAM = textwrap.dedent(
    """
    import sys
    import dra_driver.logging
    from dra_driver.structured import cel as ours
    heavy = sorted(m for m in ("prompt_toolkit", "rich", "pygments", "cel.cli") if m in sys.modules)
    print("heavy", heavy)
    import cel
    print("same library", cel.Context is ours.cel.Context, cel.stdlib is ours.stdlib)
    print("evaluates", cel.evaluate("1 + size(device.driver)", {"device": {"driver": "abc"}}))
    import cel.cli
    print("shell still importable", hasattr(cel.cli, "__file__"))
    """
)


def test_selectors_load_neither_the_cel_shell_nor_rich_and_cel_stays_whole() -> None:
    """No prompt_toolkit/rich/pygments after import; `import cel` later gets the same library."""
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "heavy []",
        "same library True True",
        "evaluates 4",
        "shell still importable True",
    ]
