"""GpuShareQuotas in ``status``: what each allows, what its namespace holds, who waits on it.

What a quota has used is counted here, from the claims and slices ``status`` reads, as the
controller counts it (:func:`dra_driver.quota.cluster_uses`); the quota's own ``status`` is
not read: ``status`` is also the tool for when the controller is down, and then that is stale.
A pod waits on a quota when it holds this driver's scheduling gate and the newest warning
about it is the controller's ``QuotaExceeded``, whose message names each quota it would take
over (``GpuShareQuota team-a/gpu: cores used 100, asked 40, hard 100``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from dra_driver.api import DriverNames
from dra_driver.k8s.objects import Object
from dra_driver.quota import (
    RESOURCES,
    QuotaSpecError,
    QuotaStanding,
    cluster_uses,
    parse_quota,
    render_amount,
    total_use,
)
from dra_driver.usage.render import columns

QUOTA_EXCEEDED: Final = "QuotaExceeded"
"""The reason of the controller's event on a pod that a quota of its namespace holds back."""


def quota_views(
    names: DriverNames,
    quotas: Iterable[Object],
    *,
    claims: Iterable[Object],
    slices: Iterable[Object],
    waiting: Mapping[str, str],
) -> tuple[list[QuotaStanding], list[str]]:
    """Return every enforceable quota, sorted, and why each other one is not enforced.

    ``waiting`` maps each pod held back by a quota to the controller's message about it.
    """
    parsed, problems = [], []
    for obj in quotas:
        try:
            parsed.append(parse_quota(obj))
        except QuotaSpecError as exc:
            problems.append(str(exc))
    uses = cluster_uses(claims, slices, names) if parsed else []
    views = []
    for quota in sorted(parsed, key=lambda q: (q.namespace, q.name)):
        used, count = total_use(quota, uses)
        mark = f"GpuShareQuota {quota.key}:"
        pods = tuple(sorted(pod for pod, message in waiting.items() if mark in message))
        views.append(QuotaStanding(quota, used, count, pods))
    return views, sorted(problems)


def _used_of_hard(view: QuotaStanding, resource: str) -> str:
    hard = view.quota.hard.get(resource)
    if hard is None:
        return "-"
    return f"{render_amount(resource, view.used.of(resource))}/{render_amount(resource, hard)}"


def quota_json(view: QuotaStanding) -> Object:
    """Return one quota as the ``-o json`` document lists it."""
    return {**view.document(), "exceeded": list(view.exceeded)}


def quota_lines(views: list[QuotaStanding], problems: list[str]) -> list[str]:
    """Return the quota table and the quotas that are not enforced; nothing without quotas."""
    lines: list[str] = []
    if views:
        header = ["QUOTA", "PRIORITY", *(f"{r.upper()} USED/HARD" for r in RESOURCES)]
        rows = [[*header, "CLAIMS", "EXCEEDED", "WAITING PODS"]]
        for view in views:
            over = ", ".join(view.exceeded)
            rows.append(
                [
                    view.quota.key,
                    str(view.quota.priority or "any"),
                    *(_used_of_hard(view, resource) for resource in RESOURCES),
                    str(view.claims),
                    f"yes: {over}" if over else "no",
                    ", ".join(view.waiting) or "-",
                ]
            )
        lines += ["", *columns(rows)]
    if problems:
        lines += ["", "GpuShareQuotas the driver cannot read (not enforced):"]
        lines += [f"  {problem}" for problem in problems]
    return lines
