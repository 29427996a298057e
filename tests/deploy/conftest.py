"""Session fixtures of the chart tests: helm, and each values case rendered once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from deploy.chartkit import MATRIX, Rendered, helm_binary, render


@pytest.fixture(scope="session")
def helm() -> Path:
    """Return the pinned helm binary; the test fails (not skips) when it is missing."""
    return helm_binary()


@pytest.fixture(scope="session")
def rendered(helm: Path) -> Callable[[str], Rendered]:
    """Return the render of a MATRIX case, rendering each case at most once per session."""
    cache: dict[str, Rendered] = {}

    def get(case: str) -> Rendered:
        if case not in cache:
            cache[case] = render(helm, MATRIX[case])
        return cache[case]

    return get
