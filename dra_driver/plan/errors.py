"""The one error a plan's input can cause: the command exits 2 and prints its message."""

from __future__ import annotations


class PlanInputError(ValueError):
    """The inventory, kubeconfig or workload file cannot be used; the message says why."""
