"""``gpushare-dra status``: what each card holds and which pods wait, from the API alone.

A pure function of listed objects (this driver's ResourceSlices, every ResourceClaim, the
pods not yet on a node, Warning events about pods, the GpuShareQuotas), so that it is the
same view whether the objects come from a cluster or a test. A card's use counts every
allocation of it, whoever made it: a result without a shareID takes the whole card, a share
its consumedCapacity. Quotas are counted the same way (:mod:`dra_driver.ops.quotas`); the
room held for online pods while offline ones are evicted is listed as its nominations
(:mod:`dra_driver.ops.nominations`), their victims looked up among the pods given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from dra_driver.api import DriverNames
from dra_driver.k8s import objects
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.objects import Object
from dra_driver.ops.nominations import (
    NominationView,
    nomination_json,
    nomination_lines,
    nomination_views,
)
from dra_driver.ops.quotas import (
    QUOTA_EXCEEDED,
    quota_json,
    quota_lines,
    quota_views,
)
from dra_driver.quota import QuotaStanding
from dra_driver.settings import as_document
from dra_driver.usage.model import CardUse, card_uses
from dra_driver.usage.render import card_identity, columns, cores, memory


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A pod not on a node yet, and the last warning about it."""

    pod: str
    gated: bool
    reason: str
    on_quota: bool = False
    """Held back by a GpuShareQuota: gated, and the newest warning is ``QuotaExceeded``."""


@dataclasses.dataclass(frozen=True)
class Status:
    """The whole view."""

    cards: list[CardUse]
    waiting: list[Waiting]
    quotas: list[QuotaStanding] = dataclasses.field(default_factory=list)
    quota_problems: list[str] = dataclasses.field(default_factory=list)
    """Quotas the driver cannot read, or why none could be listed."""
    nominations: list[NominationView] = dataclasses.field(default_factory=list)
    nomination_problems: list[str] = dataclasses.field(default_factory=list)
    """Nomination annotations the driver cannot read (it ignores them)."""


def _reasons(events: Iterable[Object]) -> dict[str, tuple[str, str, str]]:
    """Return, per pod UID, the newest warning's time, reason and message."""
    latest: dict[str, tuple[str, str, str]] = {}
    for event in events:
        uid = str((event.get("involvedObject") or {}).get("uid") or "")
        stamp = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if uid and (uid not in latest or stamp >= latest[uid][0]):
            latest[uid] = (stamp, str(event.get("reason")), str(event.get("message")))
    return latest


def cluster_status(
    names: DriverNames,
    *,
    slices: Iterable[Object],
    claims: Iterable[Object],
    pods: Iterable[Object],
    events: Iterable[Object],
    quotas: Iterable[Object] = (),
    quota_problems: Iterable[str] = (),
    now: float,
    victims_read: bool = True,
) -> Status:
    """Build the view; ``pods`` may be all pods, only those without a node are reported.

    ``quota_problems``: why the quotas could not be listed, if so. The victims of nominations
    are looked up in ``pods`` (``victims_read`` false: they could not be read); ``now``
    (seconds since the epoch) says which nominations have expired.
    """
    slices, claims, pods = list(slices), list(claims), list(pods)
    cards = card_uses(names, slices, claims)
    reasons = _reasons(events)
    waiting = []
    for pod in pods:
        spec = objects.spec(pod)
        gated = objects.has_scheduling_gate(pod, names.scheduling_gate)
        if spec.get("nodeName") or not (gated or spec.get("resourceClaims")):
            continue
        # The controller leaves a pod alone until its other gates are gone (Kueue's …).
        others = objects.waiting_for_other_gates(pod, names.scheduling_gate) if gated else None
        _, event, message = reasons.get(objects.uid(pod), ("", "", ""))
        reason = others or (f"{event}: {message}" if event else "")
        if not reason:
            reason = "waiting for the controller" if gated else "waiting for kube-scheduler"
        on_quota = gated and not others and event == QUOTA_EXCEEDED
        waiting.append(Waiting("/".join(object_key(pod)), gated, reason, on_quota))
    held = {w.pod: w.reason for w in waiting if w.on_quota}
    views, problems = quota_views(names, quotas, claims=claims, slices=slices, waiting=held)
    nominated, bad = nomination_views(names, claims, pods, now=now, victims_read=victims_read)
    return Status(
        cards,
        sorted(waiting, key=lambda w: w.pod),
        views,
        [*quota_problems, *problems],
        nominated,
        bad,
    )


def to_json(status: Status) -> dict[str, object]:
    """Return the ``-o json`` document."""

    def card(use: CardUse) -> dict[str, object]:
        c = use.card
        return {
            **card_identity(c),
            "product": c.product,
            "shareable": c.shareable,
            "taints": list(c.taints),
            "cores": {
                "capacity": cores(c.cores),
                "used": cores(use.cores_used),
                "free": cores(use.cores_free),
            },
            "memory": {
                "capacity": memory(c.memory),
                "used": memory(use.memory_used),
                "free": memory(use.memory_free),
            },
            "shares": [
                {
                    "claim": s.claim,
                    "pods": list(s.pods),
                    "cores": cores(s.cores),
                    "memory": memory(s.memory),
                    "wholeCard": s.whole,
                }
                for s in use.shares
            ],
        }

    waiting = [
        {"pod": w.pod, "gated": w.gated, "reason": w.reason, "waitsOnQuota": w.on_quota}
        for w in status.waiting
    ]
    return {
        "cards": [card(c) for c in status.cards],
        "waiting": waiting,
        "quotas": [quota_json(view) for view in status.quotas],
        "quotaProblems": status.quota_problems,
        "nominations": [nomination_json(view) for view in status.nominations],
        "nominationProblems": status.nomination_problems,
    }


def render(status: Status, output: str) -> str:
    """Return the view as a table (for people), or as a JSON or YAML document."""
    if output != "table":
        return as_document(to_json(status), output)
    if not status.cards:
        lines = ["no cards published by this driver (is the kubelet plugin running on GPU nodes?)"]
    else:
        rows = [
            ["NODE", "CARD", "PRODUCT", "SHARES", "CORES USED/FREE", "MEMORY USED/FREE", "HELD BY"]
        ]
        for use in status.cards:
            held = ", ".join(
                f"{','.join(s.pods) or '-'} ({s.claim}{', whole card' if s.whole else ''})"
                for s in use.shares
            )
            rows.append(
                [
                    use.card.node,
                    use.card.device,
                    use.card.product,
                    str(len(use.shares)),
                    f"{cores(use.cores_used)}/{cores(use.cores_free)}",
                    f"{memory(use.memory_used)}/{memory(use.memory_free)}",
                    held or "-",
                ]
            )
        lines = columns(rows)
        cards = [use.card for use in status.cards]
        tainted = [f"{c.node}/{c.device} {', '.join(c.taints)}" for c in cards if c.taints]
        if tainted:
            lines += ["", "tainted (no new claim lands there unless it tolerates the taint):"]
            lines += [f"  {line}" for line in tainted]
        whole = sorted({c.node for c in cards if not c.shareable})
        if whole:
            lines += [
                "",
                f"whole cards only on {', '.join(whole)}: the API server drops consumable "
                "capacity; the controller shares these cards by GpuShareConfig cores and "
                "memory (unless run with --share-whole-only-cards=false), capacity requests are "
                "refused, and pods it does not place get whole cards (enable the "
                "DRAConsumableCapacity feature gate to share by capacity requests)",
            ]
    lines += quota_lines(status.quotas, status.quota_problems)
    lines += nomination_lines(status.nominations, status.nomination_problems)
    if status.waiting:
        lines += [
            "",
            *columns(
                [
                    ["WAITING POD", "GATED", "REASON"],
                    *([w.pod, "yes" if w.gated else "no", w.reason] for w in status.waiting),
                ]
            ),
        ]
    else:
        lines += ["", "no pod waits for a card"]
    return "\n".join(lines)
