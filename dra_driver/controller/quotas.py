"""GpuShareQuotas in the controller: held at allocation, reported in their status.

:func:`~dra_driver.engine.quotas.decision_breaches` is the allocator's question
before it writes a decision: would these claims take any quota of their namespace over its
``hard``? It counts from the allocation snapshot, which holds every allocated claim the
watch has shown plus the controller's own writes not shown yet, so two decisions in a row
never both take the last room. :func:`over_quota_now` is the second pass's question when
another decider may have written meanwhile (no leader election): is a quota over now?

:class:`QuotaStatus` is the leader's loop that writes ``status`` (used, claims, the Exceeded
condition naming the claims kube-scheduler allocated, which the controller cannot hold) and
keeps the ``gpushare_quota_used`` / ``gpushare_quota_hard`` gauges.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from kubernetes import client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dra_driver.api import QUOTA_KIND, DriverNames
from dra_driver.engine import Snapshot
from dra_driver.k8s import objects, raw
from dra_driver.k8s.events import EventSink
from dra_driver.k8s.informer import Informer
from dra_driver.k8s.objects import Object
from dra_driver.k8s.timestamps import rfc3339
from dra_driver.logging import get_logger
from dra_driver.quota import (
    RESOURCES,
    Amounts,
    Quota,
    QuotaBook,
    cluster_uses,
    outside_controller,
    render_amount,
    total_use,
)

log = get_logger(__name__)

EXCEEDED: Final = "Exceeded"
"""The condition a quota's status carries: True while ``used`` is over ``hard``."""
_NAMED_CLAIMS: Final = 20
"""How many claims the Exceeded message names; the rest are counted."""


def over_quota_now(
    snapshot: Snapshot, quotas: Iterable[Quota], claims: Iterable[Object]
) -> list[str]:
    """Say which quota the counted claims take over ``hard``, in a resource ``claims`` take."""
    ours = [use for claim in claims if (use := snapshot.quota_use(claim)) is not None]
    problems = []
    for quota in quotas:
        taken, _ = total_use(quota, ours)
        used = snapshot.quota_used(quota)
        for resource, hard in quota.hard.items():
            if taken.of(resource) > 0 and used.of(resource) > hard:
                problems.append(
                    f"GpuShareQuota {quota.key}: {resource} "
                    f"{render_amount(resource, used.of(resource))} allocated, hard "
                    f"{render_amount(resource, hard)}"
                )
    return problems


class QuotaStatus:
    """Writes each quota's status from the cluster's claims; reconciled per quota key."""

    def __init__(
        self,
        names: DriverNames,
        api_client: client.ApiClient,
        *,
        quotas: Informer,
        book: QuotaBook,
        claims: Callable[[], list[Object]],
        slices: Callable[[], list[Object]],
        events: EventSink,
    ) -> None:
        self._names = names
        self._api = client.CustomObjectsApi(api_client)
        self._quotas, self._book = quotas, book
        self._claims, self._slices = claims, slices
        self._events = events
        self._lock = threading.Lock()
        self._figures: dict[tuple[str, str], tuple[Quota, Amounts]] = {}

    def exported(self) -> dict[tuple[str, str], tuple[Quota, Amounts]]:
        """Return what the gauges export: each enforceable quota and what it has used."""
        with self._lock:
            return dict(self._figures)

    def reconcile(self, key: tuple[str, str]) -> None:
        """Bring one quota's status (and gauges) in line with the claims now."""
        obj = self._quotas.get(*key)
        quota = self._book.parse(obj) if obj is not None else None
        if obj is None or quota is None:
            with self._lock:
                self._figures.pop(key, None)
            return
        claims = [c for c in self._claims() if objects.namespace(c) == quota.namespace]
        used, count = total_use(quota, cluster_uses(claims, self._slices(), self._names))
        with self._lock:
            self._figures[key] = (quota, used)
        over = [r for r, hard in quota.hard.items() if used.of(r) > hard]
        condition = _condition(quota, used, over, outside_controller(claims, quota))
        old = objects.status(obj)
        previous = next((c for c in old.get("conditions") or [] if c.get("type") == EXCEEDED), None)
        if previous is not None and previous.get("status") == condition["status"]:
            condition["lastTransitionTime"] = previous.get("lastTransitionTime")
        else:
            condition["lastTransitionTime"] = rfc3339()
        status = {
            "used": {r: render_amount(r, used.of(r)) for r in RESOURCES},
            "claims": count,
            "observedGeneration": objects.metadata(obj).get("generation"),
            "conditions": [condition],
        }
        if all(old.get(field) == value for field, value in status.items()):
            return
        raw.call(
            self._api.patch_namespaced_custom_object_status,
            *self._names.quota_group_version,
            quota.namespace,
            self._names.quota_plural,
            quota.name,
            {"status": status},
        )
        if over and (previous is None or previous.get("status") != "True"):
            self._events.record(
                {**obj, "kind": QUOTA_KIND}, "Warning", "QuotaExceeded", condition["message"]
            )
            log.warning("quota.exceeded", quota=quota.key, message=condition["message"])


def _condition(quota: Quota, used: Amounts, over: list[str], outside: list[str]) -> Object:
    if not over:
        return {
            "type": EXCEEDED,
            "status": "False",
            "reason": "WithinHard",
            "message": "every resource is within hard",
        }
    amounts = ", ".join(
        f"{r} {render_amount(r, used.of(r))} of {render_amount(r, quota.hard[r])}" for r in over
    )
    named = ", ".join(outside[:_NAMED_CLAIMS])
    if len(outside) > _NAMED_CLAIMS:  # a condition's message is capped at 32768 characters
        named += f" and {len(outside) - _NAMED_CLAIMS} more"
    who = (
        f"claims allocated by kube-scheduler, which the controller cannot hold: {named}"
        if outside
        else "claims allocated before the quota was created or lowered"
    )
    return {
        "type": EXCEEDED,
        "status": "True",
        "reason": "AllocatedOutsideController" if outside else "AllocatedBeforeQuota",
        "message": f"over hard: {amounts}; by {who}",
    }


class QuotaCollector(Collector):
    """Exports ``gpushare_quota_used`` and ``gpushare_quota_hard`` per quota and resource."""

    def __init__(self, figures: Callable[[], dict[tuple[str, str], tuple[Quota, Amounts]]]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield both gauge families (memory in bytes, cores in card-percent, cards a count)."""
        labels = ["namespace", "quota", "resource"]
        used = GaugeMetricFamily(
            "gpushare_quota_used", "What a GpuShareQuota's namespace holds", labels=labels
        )
        hard = GaugeMetricFamily(
            "gpushare_quota_hard", "What a GpuShareQuota allows", labels=labels
        )
        for quota, amounts in self._figures().values():
            for resource, limit in quota.hard.items():
                names = [quota.namespace, quota.name, resource]
                used.add_metric(names, float(amounts.of(resource)))
                hard.add_metric(names, float(limit))
        yield used
        yield hard
