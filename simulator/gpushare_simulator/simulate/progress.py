"""Progress of a simulation on stderr: one line rewritten in place on a terminal, else lines.

On a terminal the line shows the step under way and the time so far, and is cleared when the
run ends, so the report on stdout stands alone. Anywhere else (a CI log, a pipe) every step is
one plain line, which reads well after the fact.
"""

from __future__ import annotations

import time
from typing import Final, TextIO

_CLEAR_LINE: Final = "\r\033[K"


class Progress:
    """Writes progress to ``stream``."""

    def __init__(self, stream: TextIO, *, live: bool | None = None, width: int = 100) -> None:
        self._stream = stream
        self._live = stream.isatty() if live is None else live
        self._width = width
        self._started = time.monotonic()
        self._shown = False

    def __call__(self, text: str) -> None:
        """Show that ``text`` is under way."""
        line = f"[{time.monotonic() - self._started:5.1f}s] {text}"
        if self._live:
            self._stream.write(_CLEAR_LINE + line[: self._width - 1])
            self._shown = True
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def close(self) -> None:
        """Clear the live line, if one is shown."""
        if self._shown:
            self._stream.write(_CLEAR_LINE)
            self._stream.flush()
            self._shown = False
