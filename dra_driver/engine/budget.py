"""The step budget of one allocation decision: a search that explodes stops, it never hangs."""

from __future__ import annotations

from typing import Final

DEFAULT_STEP_BUDGET: Final = 20_000


class BudgetExhausted(Exception):  # noqa: N818 - an outcome, reported as a reason
    """The decision took more search steps than allowed."""


class Budget:
    """Search steps left for one decision, shared by every node it looks at."""

    def __init__(self, steps: int = DEFAULT_STEP_BUDGET) -> None:
        self.limit = steps
        self._left = steps

    def step(self) -> None:
        """Spend one step; raise :class:`BudgetExhausted` when none are left."""
        self._left -= 1
        if self._left < 0:
            raise BudgetExhausted
