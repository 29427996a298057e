"""A plan as a table for people (``-o table``) or as a JSON document for tools (``-o json``).

The JSON document (keys camelCase, amounts as Kubernetes quantity strings, absent values
``null``; fields may be added, never renamed)::

    {"kind": "CapacityPlan", "driver": "<driver name>",
     "cluster": "built-in inventory qgpu-runbook", "workload": "scenarios.yaml",
     "problems": ["<what the engine could not use; unused templates that would be refused>"],
     "skipped": ["ConfigMap default/app (document 4)"],  # kinds a plan does not place
     "refused": false,  # true when a pod or claim of the file would be refused (exit 3)
     "policies": [{
       "policy": "binpack",
       "summary": {"pods": 6, "placed": 5, "pending": 1, "refused": 0, "quota": 0,
                   "notOurs": 0, "preempts": 0, "evicted": 0},
       "pods": [{"namespace": "default", "name": "infer-0", "owner": "Deployment/infer",
                 "outcome": "placed|pending|refused|quota|notOurs|preempts|evicted",
                 "node": "node-1", "reason": null, "fitsAlone": null,
                 "victims": [],  # namespace/name of the pods evicted to make room for it
                 "shares": [{"entry": "gpu", "claim": "default/infer-0-gpu",
                             "request": "gpu", "device": "gpu-0",
                             "pciBusID": "0000:00:08.0", "cores": "40", "memory": "5Gi"}]}],
       "cards": [{"node": "node-1", "device": "gpu-0", "uuid": "GPU-1d0c…",
                  "pciBusID": "0000:00:08.0",
                  "shares": 2, "whole": false,
                  "cores": {"used": "80", "total": "100"},
                  "memory": {"used": "10Gi", "total": "15Gi"}}],
       "quotas": [{"namespace": "team-a", "name": "gpu", "priority": null,
                   "limits": {"cores": {"used": "100", "hard": "100"}},  # limited ones only
                   "claims": 2, "waiting": ["team-a/infer-2"]}]}]}

A pod with outcome ``quota`` would wait on a GpuShareQuota of its namespace: its reason is the
message of the controller's ``QuotaExceeded`` event. A pod with outcome ``preempts`` is placed
(``node``, ``shares``) once the offline pods in its ``victims`` are evicted (its reason:
``would evict default/batch-1 on node-1``); a pod of the file evicted so is ``evicted``
afterwards, ``node`` null, its reason naming the pod it made room for. A pending pod whose
preemption a PodDisruptionBudget blocks says so in its reason. ``used`` of a quota counts the
cluster's allocated claims and the plan's allocations of its namespace, under that policy.
``fitsAlone`` is set for a pending pod only: ``true`` when it would fit on the cluster as it
was before the plan (the pods planned before it are in its way), ``false`` when it would not
(the table shows ``NO FIT``). ``cores``/``memory`` of a share are ``null`` when the device is
held whole, without a share.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Final

from dra_driver.k8s.objects import Object
from dra_driver.plan.outcomes import Outcome, Plan, PlannedShare, PodPlan, PolicyPlan
from dra_driver.settings import as_document
from dra_driver.usage.model import CardUse
from dra_driver.usage.render import (
    card_json,
    columns,
    cores,
    cores_of_total,
    memory,
    memory_of_total,
)

WIDTH: Final = 100
_POD_CELLS: Final = {
    Outcome.REFUSED: "REFUSED",
    Outcome.QUOTA: "QUOTA",
    Outcome.NOT_OURS: "not ours",
    Outcome.EVICTED: "EVICTED",
}


def _optional(value: Fraction | None, fmt: Callable[[Fraction], str]) -> str | None:
    return None if value is None else fmt(value)


# -- JSON -----------------------------------------------------------------------------------


def _share_json(share: PlannedShare) -> Object:
    return {
        "entry": share.entry,
        "claim": share.claim,
        "request": share.request,
        "device": share.device,
        "pciBusID": share.pci_bus_id,
        "cores": _optional(share.cores, cores),
        "memory": _optional(share.memory, memory),
    }


def _pod_json(pod: PodPlan) -> Object:
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "owner": pod.owner,
        "outcome": pod.outcome.value,
        "node": pod.node,
        "reason": pod.reason,
        "fitsAlone": pod.fits_alone,
        "shares": [_share_json(share) for share in pod.shares],
        "victims": list(pod.victims),
    }


def _policy_json(result: PolicyPlan) -> Object:
    summary: Object = {"pods": len(result.pods)}
    summary.update({outcome.value: result.count(outcome) for outcome in Outcome})
    return {
        "policy": result.policy.value,
        "summary": summary,
        "pods": [_pod_json(pod) for pod in result.pods],
        "cards": [card_json(card) for card in result.cards],
        "quotas": [use.document() for use in result.quotas],
    }


def render_json(plan: Plan) -> str:
    """Return the plan as the JSON document described above."""
    return as_document(plan_document(plan), "json")


def plan_document(plan: Plan) -> Object:
    """Return the plan as the document described above (``-o json`` and ``-o yaml``)."""
    return {
        "kind": "CapacityPlan",
        "driver": plan.driver,
        "cluster": plan.cluster,
        "workload": plan.workload,
        "problems": list(plan.problems),
        "skipped": list(plan.skipped),
        "refused": plan.refused,
        "policies": [_policy_json(result) for result in plan.policies],
    }


# -- table ----------------------------------------------------------------------------------


def _share_cell(share: PlannedShare | None) -> str:
    if share is None:
        return ""
    where = f"{share.device} {share.pci_bus_id}".strip()
    if share.cores is None or share.memory is None:
        return f"{where} whole"
    return f"{where} {cores(share.cores)} cores {memory(share.memory)}"


def _pod_cell(pod: PodPlan) -> str:
    if pod.outcome is Outcome.PREEMPTS:
        return f"{pod.node} PREEMPTS"
    if pod.node is not None:
        return pod.node
    if pod.outcome is Outcome.PENDING:
        return "PENDING" if pod.fits_alone else "NO FIT"
    return _POD_CELLS[pod.outcome]


def _pod_rows(pods: Sequence[PodPlan]) -> list[list[str]]:
    """Return a pod's row (its node per policy) and one row per allocated device."""
    first = pods[0]
    name = first.name if first.namespace == "default" else f"{first.namespace}/{first.name}"
    rows = [[name, *map(_pod_cell, pods)]]
    keys: dict[tuple[str, int], PlannedShare] = {}
    for pod in pods:
        seen: dict[str, int] = {}
        for share in pod.shares:
            index = seen[share.entry] = seen.get(share.entry, -1) + 1
            keys.setdefault((share.entry, index), share)
    for (entry, index), share in keys.items():
        cells = []
        for pod in pods:
            mine = [s for s in pod.shares if s.entry == entry]
            cells.append(_share_cell(mine[index] if index < len(mine) else None))
        label = entry if share.request == entry else f"{entry} ({share.request})"
        rows.append([f"  {label}", *cells])
    return rows


def _reasons(pods: Sequence[PodPlan], policies: Sequence[str]) -> list[str]:
    """Return the wrapped reasons of the policies under which the pod did not land."""
    by_reason: dict[str, list[str]] = {}
    for pod, policy in zip(pods, policies, strict=True):
        if pod.reason:
            by_reason.setdefault(pod.reason, []).append(policy)
    lines = []
    for reason, named in by_reason.items():
        lines += textwrap.wrap(
            f"why ({', '.join(named)}): {reason}",
            width=WIDTH,
            initial_indent="    ",
            subsequent_indent="      ",
            break_on_hyphens=False,
        )
    return lines


def _card_cell(card: CardUse) -> str:
    if card.whole:
        return "used whole"
    if not card.shares:
        return "-"
    return f"{cores_of_total(card)} cores {memory_of_total(card)}"


def _cards(plan: Plan, header: list[str]) -> list[str]:
    """Return the utilisation of every card some policy uses, and how many none uses."""
    rows = [["CARD", *header[1:]]]
    unused = 0
    for cards in zip(*(result.cards for result in plan.policies), strict=True):
        if not any(card.whole or card.shares for card in cards):
            unused += 1
            continue
        card = cards[0].card
        rows.append([f"{card.node}/{card.device} {card.pci_bus_id}", *map(_card_cell, cards)])
    lines = columns(rows) if len(rows) > 1 else []
    if unused:
        lines.append(f"{unused} card{'s' if unused != 1 else ''} unused under every policy")
    return lines


def _quotas(plan: Plan, header: list[str]) -> list[str]:
    """Return each quota's use of its hard under every policy, with how many it holds back."""
    rows = [["QUOTA", *header[1:]]]
    for uses in zip(*(result.quotas for result in plan.policies), strict=True):
        cells = [
            use.cells() + (f"; {len(use.waiting)} waiting" if use.waiting else "") for use in uses
        ]
        quota = uses[0].quota
        label = f"{quota.key} ({quota.priority} only)" if quota.priority else quota.key
        rows.append([label, *cells])
    return columns(rows) if len(rows) > 1 else []


def summary_line(plan: Plan) -> str:
    """Return ``placed 5/6 pods (binpack), 6/6 (spread)``, noting pods of other drivers.

    Pods that preempt count as placed; the offline pods they evict (of the file or running in
    the cluster) are counted after.
    """
    counts = [
        (f"{r.count(Outcome.PLACED) + r.count(Outcome.PREEMPTS)}/{r.ours}", r.policy.value)
        for r in plan.policies
    ]
    (first, policy), *rest = counts
    text = f"placed {first} pods ({policy})" + "".join(f", {n} ({p})" for n, p in rest)
    others = plan.policies[0].count(Outcome.NOT_OURS)
    if others == 1:
        text += f"; 1 pod uses no device of {plan.driver}"
    elif others:
        text += f"; {others} pods use no device of {plan.driver}"
    evicted = [(sum(len(p.victims) for p in r.pods), r.policy.value) for r in plan.policies]
    if any(count for count, _ in evicted):
        text += "; offline pods evicted: " + ", ".join(f"{n} ({p})" for n, p in evicted)
    held = [(r.count(Outcome.QUOTA), r.policy.value) for r in plan.policies]
    if any(count for count, _ in held):
        text += "; waiting on a GpuShareQuota: " + ", ".join(f"{n} ({p})" for n, p in held)
    refused = plan.policies[0].count(Outcome.REFUSED) + plan.refused_unused
    if refused:
        text += f"; {refused} refused (pods, and templates or claims no pod uses): exit status 3"
    return text


def render_table(plan: Plan, *, summary: bool = False) -> str:
    """Return the plan as a table: pods by policy, then cards by policy, then the summary.

    ``summary``: only the pods some policy does not place, and the cards counted, not listed.
    """
    policies = [result.policy.value for result in plan.policies]
    lines = [f"workload: {plan.workload}", f"cluster:  {plan.cluster} (driver {plan.driver})"]
    lines += [f"warning: {problem}" for problem in plan.problems]
    if plan.skipped:
        lines.append(f"skipped (plan places pods and their claims only): {', '.join(plan.skipped)}")
    header = ["POD / CLAIM", *(p.upper() for p in policies)]
    lines.append("")
    rows: list[list[str]] = [header]
    breaks: dict[int, list[str]] = {}
    for pods in zip(*(result.pods for result in plan.policies), strict=True):
        if summary and all(p.outcome in (Outcome.PLACED, Outcome.NOT_OURS) for p in pods):
            continue
        rows += _pod_rows(pods)
        breaks[len(rows)] = _reasons(pods, policies)
    if len(rows) > 1:
        for index, line in enumerate(columns(rows), start=1):
            lines.append(line)
            lines += breaks.get(index, [])
        lines.append("")
    if summary:
        lines.append("cards used: " + ", ".join(_used(result) for result in plan.policies))
    else:
        lines += _cards(plan, header)
    quotas = _quotas(plan, header)
    lines += ["", *quotas] if quotas else []
    lines += ["", summary_line(plan)]
    return "\n".join(lines)


def _used(result: PolicyPlan) -> str:
    used = sum(1 for card in result.cards if card.whole or card.shares)
    return f"{used}/{len(result.cards)} ({result.policy.value})"


def render(plan: Plan, output: str, *, summary: bool = False) -> str:
    """Return the plan in ``output`` format: ``table``, ``json`` or ``yaml``."""
    if output == "table":
        return render_table(plan, summary=summary)
    return as_document(plan_document(plan), output)
