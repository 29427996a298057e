"""Run scenarios (or a user's manifest) on a started simulation stack.

Pods are created one at a time, each after the one before has settled (runs, or waits with a
reason), so that every decision sees the cluster the previous ones left: the same manifest
always gives the same placement. After a step's actions the step's checks are polled until
they hold or time runs out; the report keeps the last snapshot either way. A scenario runs in
a namespace of its own and is cleaned up after, so the next starts from empty cards.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Final

from dra_driver.api import QUOTA_KIND, DriverNames
from gpushare_simulator.simulate.actions import (
    Action,
    Apply,
    Busy,
    Complete,
    Delete,
    Idle,
    describe,
)
from gpushare_simulator.simulate.checks import StepFacts
from gpushare_simulator.simulate.cluster_ops import (
    POLL_SECONDS,
    SETTLE_SECONDS,
    ClusterOps,
    SimulationError,
    poll,
)
from gpushare_simulator.simulate.cudawork import CudaWork, CudaWorkError
from gpushare_simulator.simulate.manifests import Document, Manifest
from gpushare_simulator.simulate.observe import Snapshot
from gpushare_simulator.simulate.scenarios import Scenario, Step
from gpushare_simulator.simulate.stack import Stack

__all__ = ["CHECK_SECONDS", "Runner", "ScenarioReport", "SimulationError", "StepReport"]

CHECK_SECONDS: Final = 15.0
"""How long a step's expectations may take to hold once its actions are done."""
STABLE_SECONDS: Final = 3.0
"""A cluster that has not changed for this long will not fix a failing expectation."""


@dataclasses.dataclass(frozen=True)
class StepReport:
    """One step: what was done, what the cluster showed after, which expectations failed."""

    title: str
    actions: tuple[str, ...]
    snapshot: Snapshot
    refused: dict[str, str]
    checks: tuple[tuple[str, tuple[str, ...]], ...]
    """Each expectation, described, with its failures (none: it held)."""

    @property
    def failures(self) -> list[str]:
        """Every failure of the step's expectations."""
        return [failure for _, failures in self.checks for failure in failures]


@dataclasses.dataclass(frozen=True)
class ScenarioReport:
    """One scenario (or ``--apply`` run) from start to end."""

    name: str
    title: str
    manifest: str
    steps: tuple[StepReport, ...]
    seconds: float

    @property
    def passed(self) -> bool:
        """Whether every expectation held."""
        return not any(step.failures for step in self.steps)


class Runner:
    """Applies manifests to the stack and watches what happens."""

    def __init__(
        self, stack: Stack, names: DriverNames, on_progress: Callable[[str], None]
    ) -> None:
        self.ops = ClusterOps(stack.cluster, names)
        self.work = CudaWork(stack.cluster)
        self.progress = on_progress

    def run(self, scenario: Scenario, manifest: Manifest, namespace: str) -> ScenarioReport:
        """Run ``scenario`` with its manifest in ``namespace``; clean up after."""
        return _Run(self, manifest, namespace, scenario.name).run(scenario.title, scenario.steps)

    def apply(self, manifest: Manifest, namespace: str = "default") -> ScenarioReport:
        """Apply a whole manifest with no expectations; leave it running for the report."""
        step = Step("apply every document", (Apply(),))
        return _Run(self, manifest, namespace, "apply", clean=False).run(manifest.source, (step,))


class _Run:
    """One scenario's (or ``--apply``'s) progress through its steps."""

    def __init__(
        self, runner: Runner, manifest: Manifest, namespace: str, name: str, *, clean: bool = True
    ) -> None:
        self._ops, self._say, self._work = runner.ops, runner.progress, runner.work
        self._acted = time.monotonic()
        self._manifest, self._name = manifest, name
        self._namespace, self._clean = namespace, clean
        self._documents = [d.in_namespace(namespace) for d in manifest.documents]
        self._applied: set[int] = set()
        self._owners: dict[tuple[str, str], str] = {}
        self._namespaces = {namespace}
        self._quota_namespaces: set[str] = set()
        """Where a GpuShareQuota was applied: the snapshots show those namespaces' quotas."""

    def run(self, title: str, steps: tuple[Step, ...]) -> ScenarioReport:
        started = time.monotonic()
        self._ops.ensure_namespace(self._namespace)
        reports: list[StepReport] = []
        for number, step in enumerate(steps, start=1):
            self._progress(f"{number}/{len(steps)} {step.title}")
            before = reports[-1].snapshot if reports else None
            reports.append(self._step(step, before))
        self._work.stop(self._namespaces)
        if self._clean:
            self._progress("cleaning up")
            self._ops.clean(self._namespace)
        return ScenarioReport(
            self._name, title, self._manifest.source, tuple(reports), time.monotonic() - started
        )

    def _progress(self, text: str) -> None:
        self._say(f"{self._name}: {text}")

    def _step(self, step: Step, before: Snapshot | None) -> StepReport:
        refused: dict[str, str] = {}
        for action in step.actions:
            self._progress(describe(action, self._manifest.source))
            self._act(action, refused)
        self._acted = time.monotonic()
        facts = StepFacts(self._snapshot(), before, refused)
        if step.checks:
            self._progress("checking expectations")
            facts = self._until_checks_hold(step, facts)
        checks = tuple((check.describe(), tuple(check.failures(facts))) for check in step.checks)
        actions = tuple(describe(action, self._manifest.source) for action in step.actions)
        return StepReport(step.title, actions, facts.now, refused, checks)

    def _until_checks_hold(self, step: Step, facts: StepFacts) -> StepFacts:
        """Poll until the checks hold, the cluster stops changing, or CHECK_SECONDS pass."""
        started = changed = time.monotonic()
        while any(check.failures(facts) for check in step.checks):
            now = time.monotonic()
            if now - started > CHECK_SECONDS or now - changed > STABLE_SECONDS:
                break
            time.sleep(POLL_SECONDS)
            latest = StepFacts(self._snapshot(), facts.before, facts.refused)
            if latest.now != facts.now:
                changed = time.monotonic()
            facts = latest
        return facts

    def _snapshot(self) -> Snapshot:
        snapshot = self._ops.observer.snapshot(
            self._namespaces, self._owners, self._quota_namespaces
        )
        tasks = self._work.facts(self._namespaces, self._acted)
        return dataclasses.replace(snapshot, tasks=tasks)

    def _act(self, action: Action, refused: dict[str, str]) -> None:
        if isinstance(action, Apply):
            for document in self._documents:
                if document.index in self._applied:
                    continue
                if action.step is None or document.step == action.step:
                    self._applied.add(document.index)
                    self._apply(document.pinned(action.node) if action.node else document, refused)
            return
        if isinstance(action, Busy | Idle):
            self._set_busy(action.pod, isinstance(action, Busy))
            return
        pods = [key for key, owner in self._owners.items() if owner == action.owner]
        if not pods:
            raise SimulationError(f"{action.owner} has no pods to act on")
        for namespace, name in pods:
            if isinstance(action, Complete):
                self._ops.complete_pod(namespace, name)
            elif isinstance(action, Delete):
                self._ops.delete_pod(namespace, name)
                del self._owners[(namespace, name)]

    def _set_busy(self, pod: str, busy: bool) -> None:
        keys = [key for key in self._owners if key[1] == pod]
        if not keys:
            raise SimulationError(f"there is no pod {pod} to run CUDA work in")
        try:
            self._work.set_busy(*keys[0], busy)
        except CudaWorkError as exc:
            raise SimulationError(str(exc)) from exc

    def _apply(self, document: Document, refused: dict[str, str]) -> None:
        namespace = document.body["metadata"].get("namespace") or self._namespace
        if document.kind == "Namespace":
            self._ops.ensure_namespace(document.name)
            return
        if document.kind != "DeviceClass" and namespace not in self._namespaces:
            self._namespaces.add(namespace)
            self._ops.ensure_namespace(namespace)
        if not document.pods:
            message = self._ops.create(document.body, namespace)
            if message is not None:
                refused[document.reference] = message
            elif document.kind == QUOTA_KIND:
                self._quota_namespaces.add(namespace)
            return
        for pod in document.pods:
            name = pod["metadata"]["name"]
            message = self._ops.create(pod, namespace)
            if message is not None:
                refused[f"Pod/{name}" if document.kind != "Pod" else document.reference] = message
                continue
            self._owners[(namespace, name)] = document.reference
            # A pod that never settles is not an error here: the report shows it as it is.
            poll(functools.partial(self._ops.settled, namespace, name), SETTLE_SECONDS)
