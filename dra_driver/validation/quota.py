"""A claim no GpuShareQuota of its namespace could ever admit: refused at creation.

The controller holds a quota at allocation, so a claim larger than a quota's ``hard`` would
wait forever. Its least possible size is counted per request as the smallest of its
alternatives: a share's cores and memory times its count, a whole card (no size, or
``isolation: exclusive``) 100 cores and one card each (its memory depends on the card, so it
is not counted here), ``allocationMode: All`` one device at least, admin access nothing, and
an alternative of a priority the quota does not count nothing. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import cast

from dra_driver.api import DriverNames
from dra_driver.api.errors import Reason
from dra_driver.api.fields import CORES, MAX_CORES, MEMORY
from dra_driver.engine.requests import Alternative, ClaimRefused, parse_claim
from dra_driver.k8s.objects import Object, ObjectView
from dra_driver.quota import RESOURCES, Amounts, Quota, render_amount


def least_asked(alternative: Alternative, quota: Quota) -> Amounts:
    """Return the least ``alternative`` takes of ``quota`` once allocated."""
    if alternative.admin or not quota.counts(alternative.config.priority):
        return Amounts()
    count = Fraction(1 if alternative.all_devices else alternative.count)
    if alternative.capacity and not alternative.exclusive:
        return Amounts(
            cores=count * alternative.capacity.get(CORES, Fraction(0)),
            memory=count * alternative.capacity.get(MEMORY, Fraction(0)),
        )
    return Amounts(cores=count * MAX_CORES, cards=count)


def quota_problems(
    claim_spec: ObjectView,
    *,
    path: str,
    names: DriverNames,
    classes: Mapping[str, ObjectView],
    quotas: Sequence[Quota],
) -> list[str]:
    """Say which quota the claim at ``path`` asks more of than it allows, by itself."""
    if not quotas:
        return []
    try:
        # Read only: the parser takes the mutable alias, but never changes a class.
        parsed = parse_claim(
            {"spec": dict(claim_spec)}, names, cast("Mapping[str, Object]", classes)
        )
    except ClaimRefused:
        return []  # not a claim of this driver alone, or refused by the claim checks
    problems = []
    for quota in quotas:
        least = Amounts()
        for request in parsed.requests:
            options = [least_asked(a, quota) for a in request.alternatives]
            least += Amounts(
                *(min(option.of(resource) for option in options) for resource in RESOURCES)
            )
        for resource, hard in quota.hard.items():
            if least.of(resource) > hard:
                problems.append(
                    f"{path}.devices.requests: {Reason.FORBIDDEN}: GpuShareQuota {quota.key} "
                    f"allows {resource} {render_amount(resource, hard)} in this namespace and "
                    f"this claim alone asks at least {render_amount(resource, least.of(resource))}"
                    f": it could never be allocated; ask for less or raise the quota's "
                    f"spec.hard.{resource}"
                )
    return problems
