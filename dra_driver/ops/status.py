"""``gpushare-dra status``: what each card holds and which pods wait, from the API alone.

A pure function of listed objects (this driver's ResourceSlices, every ResourceClaim, the
pods not yet on a node, Warning events about pods), so that it is the same view whether the
objects come from a cluster or a test. A card's use counts every allocation of it, whoever
made it: a result without a shareID takes the whole card, a share its consumedCapacity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from dra_driver.api import DriverNames
from dra_driver.k8s import objects
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.quantity import QuantityError, QuantityFormat, format_quantity, parse_quantity
from dra_driver.settings import as_document
from dra_driver.structured.configshares import counted_claims, slice_capacities

Object = dict[str, Any]
_ZERO = Fraction(0)


@dataclasses.dataclass(frozen=True)
class Share:
    """One allocation on a card: the claim, its pods, what it takes."""

    claim: str
    pods: tuple[str, ...]
    cores: Fraction
    memory: Fraction
    whole: bool


@dataclasses.dataclass
class Card:
    """One published device (a card) and what is allocated on it."""

    node: str
    device: str
    uuid: str
    product: str
    cores: Fraction
    memory: Fraction
    shareable: bool = True
    """False for a plain device: its API server has no consumable capacity (whole cards only)."""
    taints: tuple[str, ...] = ()
    """The device's taints as ``key=value:Effect`` (an unhealthy card's, say)."""
    shares: list[Share] = dataclasses.field(default_factory=list)

    @property
    def cores_used(self) -> Fraction:
        """Cores allocated (all of them once a claim holds the card whole)."""
        return sum((s.cores for s in self.shares), _ZERO)

    @property
    def memory_used(self) -> Fraction:
        """Memory allocated, in bytes."""
        return sum((s.memory for s in self.shares), _ZERO)


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A pod not on a node yet, and the last warning about it."""

    pod: str
    gated: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class Status:
    """The whole view."""

    cards: list[Card]
    waiting: list[Waiting]


def _quantity(value: object) -> Fraction:
    try:
        return parse_quantity(str(value)) if value is not None else _ZERO
    except QuantityError:
        return _ZERO


def _cards(names: DriverNames, slices: Iterable[Object]) -> dict[tuple[str, str], Card]:
    cards: dict[tuple[str, str], Card] = {}
    for slice_ in slices:
        spec = slice_.get("spec") or {}
        if spec.get("driver") != names.driver:
            continue
        pool = str((spec.get("pool") or {}).get("name") or "")
        for device in spec.get("devices") or []:
            attributes = device.get("attributes") or {}
            capacity = device.get("capacity") or {}
            cards[pool, str(device.get("name"))] = Card(
                node=str(spec.get("nodeName") or pool),
                device=str(device.get("name")),
                uuid=str((attributes.get("uuid") or {}).get("string") or ""),
                product=str((attributes.get("productName") or {}).get("string") or ""),
                cores=_quantity((capacity.get("cores") or {}).get("value")),
                memory=_quantity((capacity.get("memory") or {}).get("value")),
                shareable=device.get("allowMultipleAllocations") is True,
                taints=tuple(_taint(t) for t in device.get("taints") or []),
            )
    return cards


def _taint(taint: Object) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def _add_shares(names: DriverNames, cards: dict[tuple[str, str], Card], claim: Object) -> None:
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    key = "/".join(object_key(claim))
    pods = tuple(sorted(str(r.get("name")) for r in status.get("reservedFor") or []))
    for result in results:
        card = cards.get((str(result.get("pool")), str(result.get("device"))))
        if result.get("driver") != names.driver or card is None or result.get("adminAccess"):
            continue
        if result.get("shareID"):
            consumed = result.get("consumedCapacity") or {}
            share = Share(
                key,
                pods,
                _quantity(consumed.get("cores")),
                _quantity(consumed.get("memory")),
                False,
            )
        else:
            share = Share(key, pods, card.cores, card.memory, True)
        card.shares.append(share)


def _reasons(events: Iterable[Object]) -> dict[str, tuple[str, str]]:
    """Return, per pod UID, the newest warning's time and ``reason: message``."""
    latest: dict[str, tuple[str, str]] = {}
    for event in events:
        uid = str((event.get("involvedObject") or {}).get("uid") or "")
        stamp = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        text = f"{event.get('reason')}: {event.get('message')}"
        if uid and (uid not in latest or stamp >= latest[uid][0]):
            latest[uid] = (stamp, text)
    return latest


def cluster_status(
    names: DriverNames,
    *,
    slices: Iterable[Object],
    claims: Iterable[Object],
    pods: Iterable[Object],
    events: Iterable[Object],
) -> Status:
    """Build the view; ``pods`` may be all pods, only those without a node are reported."""
    slices = list(slices)
    cards = _cards(names, slices)
    # Shares sized by config on whole-only cards read as the shares the controller counts.
    for claim in counted_claims(claims, names, slice_capacities(slices, names.driver)):
        _add_shares(names, cards, claim)
    reasons = _reasons(events)
    waiting = []
    for pod in pods:
        spec = pod.get("spec") or {}
        gated = objects.has_scheduling_gate(pod, names.scheduling_gate)
        if spec.get("nodeName") or not (gated or spec.get("resourceClaims")):
            continue
        # The controller leaves a pod alone until its other gates are gone (Kueue's …).
        others = objects.waiting_for_other_gates(pod, names.scheduling_gate) if gated else None
        reason = others or reasons.get(objects.uid(pod), ("", ""))[1]
        if not reason:
            reason = "waiting for the controller" if gated else "waiting for kube-scheduler"
        waiting.append(Waiting("/".join(object_key(pod)), gated, reason))
    ordered = sorted(cards.values(), key=lambda c: (c.node, c.device))
    return Status(ordered, sorted(waiting, key=lambda w: w.pod))


def _memory(value: Fraction) -> str:
    return format_quantity(value, QuantityFormat.BINARY)


def _cores(value: Fraction) -> str:
    return format_quantity(value)


def to_json(status: Status) -> dict[str, object]:
    """Return the ``-o json`` document."""

    def card(c: Card) -> dict[str, object]:
        return {
            "node": c.node,
            "device": c.device,
            "uuid": c.uuid,
            "product": c.product,
            "shareable": c.shareable,
            "taints": list(c.taints),
            "cores": {
                "capacity": _cores(c.cores),
                "used": _cores(c.cores_used),
                "free": _cores(c.cores - c.cores_used),
            },
            "memory": {
                "capacity": _memory(c.memory),
                "used": _memory(c.memory_used),
                "free": _memory(c.memory - c.memory_used),
            },
            "shares": [
                {
                    "claim": s.claim,
                    "pods": list(s.pods),
                    "cores": _cores(s.cores),
                    "memory": _memory(s.memory),
                    "wholeCard": s.whole,
                }
                for s in c.shares
            ],
        }

    waiting = [{"pod": w.pod, "gated": w.gated, "reason": w.reason} for w in status.waiting]
    return {"cards": [card(c) for c in status.cards], "waiting": waiting}


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


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
        for c in status.cards:
            held = ", ".join(
                f"{','.join(s.pods) or '-'} ({s.claim}{', whole card' if s.whole else ''})"
                for s in c.shares
            )
            rows.append(
                [
                    c.node,
                    c.device,
                    c.product,
                    str(len(c.shares)),
                    f"{_cores(c.cores_used)}/{_cores(c.cores - c.cores_used)}",
                    f"{_memory(c.memory_used)}/{_memory(c.memory - c.memory_used)}",
                    held or "-",
                ]
            )
        lines = _table(rows)
        tainted = [f"{c.node}/{c.device} {', '.join(c.taints)}" for c in status.cards if c.taints]
        if tainted:
            lines += ["", "tainted (no new claim lands there unless it tolerates the taint):"]
            lines += [f"  {line}" for line in tainted]
        whole = sorted({c.node for c in status.cards if not c.shareable})
        if whole:
            lines += [
                "",
                f"whole cards only on {', '.join(whole)}: the API server drops consumable "
                "capacity; the controller shares these cards by GpuShareConfig cores and "
                "memory (unless run with --share-whole-only-cards=false), capacity requests are "
                "refused, and pods it does not place get whole cards (enable the "
                "DRAConsumableCapacity feature gate to share by capacity requests)",
            ]
    if status.waiting:
        lines += [
            "",
            *_table(
                [
                    ["WAITING POD", "GATED", "REASON"],
                    *([w.pod, "yes" if w.gated else "no", w.reason] for w in status.waiting),
                ]
            ),
        ]
    else:
        lines += ["", "no pod waits for a card"]
    return "\n".join(lines)
