"""A simulation's report as tables for people (``-o table``) or a JSON document (``-o json``).

The JSON document (keys camelCase, amounts as Kubernetes quantity strings, absent values
``null``; fields may be added, never renamed)::

    {"kind": "Simulation", "driver": "<driver name>",
     "inventory": "built-in inventory qgpu-runbook",
     "kubernetes": "the fake API server",
     "policy": {"online": "spread", "offline": "binpack", "node": "binpack"},
     "passed": true, "seconds": 9.1,
     "scenarios": [{
       "name": "sharing", "title": "...", "manifest": "deploy/examples/sharing.yaml",
       "passed": true, "seconds": 0.9,
       "steps": [{
         "title": "...", "actions": ["apply deploy/examples/sharing.yaml"],
         "pods": [{"namespace": "sharing", "name": "infer-a-0", "owner": "Deployment/infer-a",
                   "phase": "Running", "node": "node-1", "reason": null,
                   "shares": [{"claim": "sharing/infer-a-0-gpu-x7k2p", "request": "gpu",
                               "node": "node-1", "device": "gpu-0",
                               "uuid": "GPU-26975e32-...", "pciBusID": "0000:00:08.0",
                               "cores": "40", "memory": "5Gi",
                               "isolation": "burst-share", "priority": "online"}],
                   "env": {"server": {"CUDA_DEVICE_MEMORY_LIMIT_0": "5120m", "...": "..."}}}],
         "refused": [{"object": "ResourceClaimTemplate/too-large", "message": "..."}],
         "cards": [{"node": "node-1", "device": "gpu-0", "uuid": "GPU-26975e32-...",
                    "pciBusID": "0000:00:08.0", "shares": 2, "whole": false,
                    "cores": {"used": "70", "total": "100"},
                    "memory": {"used": "10Gi", "total": "15Gi"}}],
         "cuda": [{"pod": "batch-0", "busy": true, "held": true, "smLimit": true,
                   "smLimitPercent": 40, "smUtilization": 0, "memoryUsed": "4Gi",
                   "changes": [{"after": 0.61, "what": "held"}]}],
         "quotas": [{"namespace": "quota", "name": "gpu",
                     "hard": {"cores": "100", "memory": "10Gi"},
                     "used": {"cores": "100", "memory": "10Gi", "cards": "0"},
                     "exceeded": "False"}],
         "expectations": [{"expect": "pod infer-a-0 is Running on node-1 ...",
                           "passed": true, "failures": []}]}]}]}

A pod's ``event`` is the reason of the newest warning about it while it does not run
(``FailedAllocation``, ``QuotaExceeded``), ``null`` otherwise. ``quotas`` are the
GpuShareQuotas of each namespace the run applied one in: their ``spec.hard``, and the
``status.used`` and ``Exceeded`` condition the controller wrote (``{}`` and ``null`` until it
did).
``--apply`` reports one scenario named ``apply`` with no expectations. A share's ``node``,
``device``, ``uuid`` and ``pciBusID`` are ``null`` until it is allocated, and its ``cores`` and
``memory`` are then what it asks for (``null``: not asked, so all of a card). ``env`` holds
every ``CUDA_*``, ``GPU_*`` and ``GPUSHARE_*`` variable per container of a running pod.
``cuda`` lists the simulated CUDA processes of the scenario's pods: whether each launches
kernels, is held by the node monitor, has its SM limit applied (``smLimit``; the limit itself
is ``smLimitPercent``), reports SM use into its region, and what changed how many
seconds after the step's actions (``held``, ``resumed``, ``kernels held``,
``kernels run``, ``SM limit on``, ``SM limit off``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from fractions import Fraction
from typing import Final

from dra_driver.k8s.objects import Object
from dra_driver.settings import as_document
from dra_driver.usage import render as usage
from dra_driver.usage.model import CardUse
from gpushare_simulator.simulate.cudawork import TaskFact
from gpushare_simulator.simulate.observe import PodFact, QuotaFact, ShareFact
from gpushare_simulator.simulate.runner import ScenarioReport, StepReport

WIDTH: Final = 100
# The same in every container, so the table leaves them out; JSON has them.
_CONSTANT_ENV: Final = frozenset(
    {"CUDA_DEVICE_ORDER", "CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_MPS_PIPE_DIRECTORY"}
)
_POD_HEADER: Final = ("POD", "PHASE", "NODE", "CARD", "CORES", "MEMORY", "ISOLATION", "PRIORITY")
_CARD_HEADER: Final = ("CARD", "UUID", "SHARES", "CORES", "MEMORY")
_TASK_HEADER: Final = ("CUDA WORK", "KERNELS", "SMS IT MAY USE", "MEMORY", "AFTER THE ACTIONS")
_QUOTA_HEADER: Final = ("QUOTA", "USED/HARD (ITS STATUS)", "EXCEEDED")


def _cores(value: Fraction | None) -> str | None:
    return None if value is None else usage.cores(value)


def _memory(value: Fraction | None) -> str | None:
    return None if value is None else usage.memory(value)


# -- JSON -----------------------------------------------------------------------------------


def _share_json(share: ShareFact) -> Object:
    card = share.card
    return {
        "claim": share.claim,
        "request": share.request,
        "node": card.node if card else None,
        "device": card.device if card else None,
        "uuid": card.uuid if card else None,
        "pciBusID": card.pci_bus_id if card else None,
        "cores": _cores(share.cores),
        "memory": _memory(share.memory),
        "isolation": share.isolation,
        "priority": share.priority,
    }


def _pod_json(pod: PodFact) -> Object:
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "owner": pod.owner,
        "phase": pod.phase,
        "node": pod.node,
        "reason": pod.reason,
        "event": pod.event,
        "shares": [_share_json(share) for share in pod.shares],
        "env": {container: dict(env) for container, env in pod.env.items()},
    }


def _task_json(task: TaskFact) -> Object:
    return {
        "pod": task.pod,
        "busy": task.busy,
        "held": task.held,
        "smLimit": task.limited,
        "smLimitPercent": task.sm_limit,
        "smUtilization": task.sm_util,
        "memoryUsed": _memory(Fraction(task.memory)),
        "changes": [{"after": after, "what": what} for after, what in task.changes],
    }


def _step_json(step: StepReport) -> Object:
    return {
        "title": step.title,
        "actions": list(step.actions),
        "pods": [_pod_json(pod) for pod in step.snapshot.pods],
        "refused": [{"object": ref, "message": message} for ref, message in step.refused.items()],
        "cards": [usage.card_json(use) for use in step.snapshot.cards],
        "cuda": [_task_json(task) for task in step.snapshot.tasks],
        "quotas": [
            {
                "namespace": quota.namespace,
                "name": quota.name,
                "hard": dict(quota.hard),
                "used": dict(quota.used),
                "exceeded": quota.exceeded,
            }
            for quota in step.snapshot.quotas
        ],
        "expectations": [
            {"expect": expect, "passed": not failures, "failures": list(failures)}
            for expect, failures in step.checks
        ],
    }


def render_document(
    header: Object, reports: Sequence[ScenarioReport], seconds: float, output: str
) -> str:
    """Return the report as a JSON or YAML document; ``header``: driver, inventory, policy."""
    document = {
        "kind": "Simulation",
        **header,
        "passed": all(report.passed for report in reports),
        "seconds": round(seconds, 1),
        "scenarios": [
            {
                "name": report.name,
                "title": report.title,
                "manifest": report.manifest,
                "passed": report.passed,
                "seconds": round(report.seconds, 1),
                "steps": [_step_json(step) for step in report.steps],
            }
            for report in reports
        ],
    }
    return as_document(document, output)


# -- table ----------------------------------------------------------------------------------


def _wrap(label: str, text: str) -> list[str]:
    return textwrap.wrap(
        f"{label}: {text}",
        WIDTH,
        initial_indent="    ",
        subsequent_indent="      ",
        break_on_hyphens=False,
    )


def _share_cells(share: ShareFact) -> list[str]:
    card = f"{share.card.short_uuid} {share.card.pci_bus_id}" if share.card else "-"
    return [
        card,
        _cores(share.cores) or "all",
        _memory(share.memory) or "all",
        share.isolation or "-",
        share.priority or "-",
    ]


def _pod_lines(pods: Sequence[PodFact]) -> list[str]:
    rows: list[list[str]] = [list(_POD_HEADER)]
    notes: dict[int, list[str]] = {}
    for pod in pods:
        shares = pod.shares or ()
        first = [pod.name, pod.phase, pod.node or "-"]
        rows.append(first + (_share_cells(shares[0]) if shares else ["-"] * 5))
        rows.extend(["", "", "", *_share_cells(share)] for share in shares[1:])
        lines = []
        for container, env in pod.env.items():
            shown = " ".join(
                f"{k}={v}"
                for k, v in env.items()
                if k not in _CONSTANT_ENV and not k.startswith("GPUSHARE_")
            )
            label = "env" if len(pod.env) == 1 else f"env ({container})"
            lines += _wrap(label, shown) if shown else []
        if pod.reason:
            lines += _wrap("why", pod.reason)
        notes[len(rows) - 1] = lines
    out = []
    for index, line in enumerate(usage.columns(rows)):
        out.append(line)
        out.extend(notes.get(index, []))
    return out


def _card_lines(cards: Sequence[CardUse]) -> list[str]:
    rows = [list(_CARD_HEADER)]
    for use in cards:
        card = use.card
        rows.append([
            f"{card.node}/{card.device} {card.pci_bus_id}",
            card.short_uuid,
            "whole" if use.whole else str(len(use.shares)),
            usage.cores_of_total(use),
            usage.memory_of_total(use),
        ])  # fmt: skip
    return usage.columns(rows)


def _task_lines(tasks: Sequence[TaskFact]) -> list[str]:
    rows = [list(_TASK_HEADER)]
    for task in tasks:
        kernels = "held" if task.held else ("running" if task.busy else "idle")
        changes = ", ".join(f"{what} {after:.1f} s" for after, what in task.changes)
        may_use = f"{task.sm_limit}% (its limit)" if task.limited else "all that are idle"
        rows.append([
            task.pod,
            kernels,
            "none" if task.held else may_use,
            _memory(Fraction(task.memory)) or "0",
            changes or "-",
        ])  # fmt: skip
    return usage.columns(rows)


def _quota_lines(quotas: Sequence[QuotaFact]) -> list[str]:
    rows = [list(_QUOTA_HEADER)]
    for quota in quotas:
        used = ", ".join(
            f"{resource} {quota.used.get(resource, '?')}/{hard}"
            for resource, hard in quota.hard.items()
        )
        rows.append([quota.name, used, quota.exceeded or "-"])
    return usage.columns(rows) if quotas else []


def _step_lines(number: int, step: StepReport, previous: StepReport | None) -> list[str]:
    """Return a step's lines; pods and cards unchanged since the step before are not repeated."""
    lines = [f"step {number}: {step.title}", *(f"  > {action}" for action in step.actions)]
    pods, cards = _pod_lines(step.snapshot.pods), _card_lines(step.snapshot.cards)
    quotas = _quota_lines(step.snapshot.quotas)
    same = (
        previous is not None
        and not step.refused
        and (pods, cards, quotas)
        == (
            _pod_lines(previous.snapshot.pods),
            _card_lines(previous.snapshot.cards),
            _quota_lines(previous.snapshot.quotas),
        )
    )
    if same:
        lines += ["", f"pods and cards as after step {number - 1}"]
    else:
        if step.snapshot.pods:
            lines += ["", *pods]
        for ref, message in step.refused.items():
            lines += ["", f"REFUSED {ref}", *_wrap("error", message)]
        lines += ["", *cards]
        lines += ["", *quotas] if quotas else []
    return [*lines, "", *_task_lines(step.snapshot.tasks)] if step.snapshot.tasks else lines


def _failed(report: ScenarioReport) -> int:
    return sum(1 for step in report.steps for _, failures in step.checks if failures)


def _verdict(report: ScenarioReport) -> list[str]:
    total = sum(len(step.checks) for step in report.steps)
    if report.passed:
        return [f"PASS  {report.name}: all {total} expectations held"]
    failed = [(n, f) for n, step in enumerate(report.steps, 1) for f in step.failures]
    lines = [f"FAIL  {report.name}: {_failed(report)} of {total} expectations failed"]
    for number, failure in failed:
        lines += textwrap.wrap(
            f"- step {number}: {failure}",
            WIDTH,
            initial_indent="      ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
    return lines


def _summary(reports: Sequence[ScenarioReport], seconds: float) -> list[str]:
    passed = sum(report.passed for report in reports)
    verdict = "PASS" if passed == len(reports) else "FAIL"
    lines = [f"RESULT {verdict}: {passed} of {len(reports)} scenarios passed in {seconds:.1f} s"]
    width = max(len(report.name) for report in reports)
    for report in reports:
        total = sum(len(step.checks) for step in report.steps)
        outcome = f"{total} expectations"
        outcome = outcome if report.passed else f"{_failed(report)} of {outcome} failed"
        status = "PASS" if report.passed else "FAIL"
        lines.append(f"  {status}  {report.name.ljust(width)}  {outcome}, {report.seconds:.1f} s")
    return lines


def render_table(
    intro: Sequence[str], reports: Sequence[ScenarioReport], seconds: float, *, expectations: bool
) -> str:
    """Return the report as text: per scenario its steps, pods and cards, then the verdicts."""
    lines = [
        wrapped for line in intro for wrapped in textwrap.wrap(line, WIDTH, subsequent_indent="  ")
    ]
    for report in reports:
        rule = f"== {report.name}: {report.title} "
        lines += ["", rule + "=" * max(2, WIDTH - len(rule)), ""]
        previous = None
        for number, step in enumerate(report.steps, start=1):
            lines += [*_step_lines(number, step, previous), ""]
            previous = step
        lines += _verdict(report) if expectations else []
    if expectations and reports:
        lines += ["", *_summary(reports, seconds)]
    return "\n".join(lines).rstrip() + "\n"
