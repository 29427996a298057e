"""PodDisruptionBudgets in a plan: what each allows, as the plan's evictions go on.

A plan's evictions (:mod:`dra_driver.plan.preemption`) respect budgets as the controller does
(docs/preemption.md): a set of victims that would take a budget below what it allows is not
chosen. The budgets come from the live cluster (``plan --kubeconfig``) or from the workload
file (``kind: PodDisruptionBudget``, ``policy/v1``).

What a budget allows:

- with ``status.disruptionsAllowed`` (every budget read from a cluster, where
  kube-controller-manager keeps it): that, less the plan's evictions so far that it covers;
- a budget of the file without a status: computed as kube-controller-manager would, against
  the plan's picture: its healthy pods are the pods it selects that run there now (the plan's
  placed pods and, live, the cluster's), its expected pods those plus the pods of the file it
  selects that do not run; ``minAvailable`` or ``maxUnavailable`` (a number, or a percentage
  of the expected pods rounded up) says how many must stay; a budget with neither allows none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Final

from dra_driver.engine.preempt import DisruptionBudget, Victim, disruption_budget
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.scheduling import label_selector_matches

_PERCENT: Final = re.compile(r"^[0-9]+%$")
_AMOUNTS: Final = ("minAvailable", "maxUnavailable")


def budget_problem(body: Object) -> tuple[str, str] | None:
    """Return ``(field, problem)`` for a PodDisruptionBudget of a file a plan cannot read."""
    spec = body.get("spec", {})
    if not isinstance(spec, dict):
        return "spec", "expected an object"
    if "selector" in spec and not isinstance(spec["selector"], dict | None):
        return "spec.selector", "expected a label selector"
    given = [field for field in _AMOUNTS if spec.get(field) is not None]
    if len(given) > 1:
        return "spec", "minAvailable and maxUnavailable cannot both be set"
    for field in given:
        value = spec[field]
        if isinstance(value, bool) or not (
            (isinstance(value, int) and value >= 0)
            or (isinstance(value, str) and _PERCENT.match(value))
        ):
            return f"spec.{field}", f"expected a whole number or a percentage, got {value!r}"
    status = body.get("status") or {}
    allowed = status.get("disruptionsAllowed") if isinstance(status, dict) else None
    if allowed is not None and (
        isinstance(allowed, bool) or not isinstance(allowed, int) or allowed < 0
    ):
        return "status.disruptionsAllowed", f"expected a whole number, got {allowed!r}"
    return None


def _has_status(budget: Object) -> bool:
    status = budget.get("status")
    return isinstance(status, dict) and status.get("disruptionsAllowed") is not None


def _scaled(value: int | str, expected: int) -> int:
    """Return an amount of pods: a number as is, a percentage of ``expected`` rounded up."""
    if isinstance(value, str):
        return math.ceil(int(value.removesuffix("%")) * expected / 100)
    return int(value)


class PlanBudgets:
    """The budgets one policy's plan respects; :meth:`now` says what each allows now."""

    def __init__(
        self, cluster: Iterable[Object], written: Iterable[Object], file_pods: Sequence[Object]
    ) -> None:
        written = list(written)
        self._counted = [*cluster, *(b for b in written if _has_status(b))]
        """Budgets read as they are: the cluster's, and the file's that have a status."""
        self._computed = [b for b in written if not _has_status(b)]
        self._file_pods = file_pods
        """Every pod of the workload file, placed or not: a budget's expected pods."""
        self._evicted: list[Victim] = []

    def evicted(self, victims: Iterable[Victim]) -> None:
        """Count evictions the plan made: budgets with a status allow that many fewer."""
        self._evicted.extend(victims)

    def now(self, running: Iterable[Object]) -> list[DisruptionBudget]:
        """Return every budget with what it allows now; ``running``: the pods that run."""
        found = []
        for budget in self._counted:
            read = disruption_budget(budget)
            spent = sum(read.covers(victim) for victim in self._evicted)
            allowed = max(0, read.allowed - spent)
            found.append(DisruptionBudget(read.namespace, read.name, read.selector, allowed))
        running = list(running)
        found += [self._computed_budget(budget, running) for budget in self._computed]
        return found

    def _computed_budget(self, budget: Object, running: Sequence[Object]) -> DisruptionBudget:
        namespace, spec = objects.namespace(budget), objects.spec(budget)
        selector = spec.get("selector")

        def selected(pods: Iterable[Object]) -> set[str]:
            return {
                objects.name(pod)
                for pod in pods
                if objects.namespace(pod) == namespace
                and label_selector_matches(selector, objects.metadata(pod).get("labels") or {})
            }

        healthy = selected(running)
        expected = len(healthy | selected(self._file_pods))
        if spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected)
        elif spec.get("maxUnavailable") is not None:
            desired = expected - _scaled(spec["maxUnavailable"], expected)
        else:
            desired = len(healthy)
        allowed = max(0, len(healthy) - desired)
        return DisruptionBudget(namespace, objects.name(budget), selector, allowed)
