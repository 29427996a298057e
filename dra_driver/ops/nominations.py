"""Nominations in ``status``: room held for an online pod while offline pods are evicted.

The controller writes a nomination as an annotation on each claim of the online pod
(:mod:`dra_driver.engine.nomination`, docs/preemption.md). ``status`` shows one per unallocated
claim that carries one: the pod it holds room for, the node and the planned cards, each victim
and whether it still runs, and when the hold expires. An annotation on an allocated claim holds
nothing and is not shown; a malformed one is a problem line, as the controller ignores it.

A victim's state comes from the pods ``status`` read: ``running`` (there, not being deleted),
``terminating`` (being deleted), ``finished`` (succeeded or failed), ``gone`` (not there, or
re-created with another UID), ``unknown`` (its pod could not be read).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Final

from dra_driver.api import DriverNames
from dra_driver.api.fields import CORES, MEMORY
from dra_driver.engine.nomination import Nomination, NominationError, PodRef, nomination_of
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import QuantityError, parse_quantity
from dra_driver.usage.render import columns, cores, memory

RUNNING: Final = "running"
TERMINATING: Final = "terminating"
FINISHED: Final = "finished"
GONE: Final = "gone"
UNKNOWN: Final = "unknown"


@dataclasses.dataclass(frozen=True)
class PlannedDevice:
    """A device the nomination holds room on; no amounts: the card whole."""

    pool: str
    device: str
    cores: str | None
    memory: str | None


@dataclasses.dataclass(frozen=True)
class NominationView:
    """One claim's nomination, as ``status`` shows it."""

    claim: str
    pod: str
    node: str
    devices: tuple[PlannedDevice, ...]
    victims: tuple[tuple[str, str], ...]
    """``(namespace/name, state)`` per victim, in the nomination's order."""
    expires: str
    expired: bool


def _unallocated_nominations(
    names: DriverNames, claims: Iterable[Object]
) -> Iterable[tuple[Object, Nomination | NominationError]]:
    """Yield each unallocated claim with a nomination annotation, and it or why it is bad."""
    for claim in claims:
        if objects.status(claim).get("allocation"):
            continue
        try:
            found = nomination_of(claim, names.nomination_annotation)
        except NominationError as exc:
            yield claim, exc
            continue
        if found is not None:
            yield claim, found


def victims_to_read(names: DriverNames, claims: Iterable[Object]) -> list[tuple[str, str]]:
    """Return ``(namespace, name)`` of every victim named by a nomination, sorted, once each."""
    wanted = {
        (victim.namespace, victim.name)
        for _, found in _unallocated_nominations(names, claims)
        if isinstance(found, Nomination)
        for victim in found.victims
    }
    return sorted(wanted)


def _state(victim: PodRef, pods: Mapping[tuple[str, str], Object], read: bool) -> str:
    if not read:
        return UNKNOWN
    pod = pods.get((victim.namespace, victim.name))
    if pod is None or objects.uid(pod) != victim.uid:
        return GONE
    if objects.is_deleting(pod):
        return TERMINATING
    if objects.status(pod).get("phase") in ("Succeeded", "Failed"):
        return FINISHED
    return RUNNING


def _amount(consumed: Mapping[str, object], name: str, fmt: str) -> str | None:
    value = consumed.get(name)
    if value is None:
        return None
    try:
        amount = parse_quantity(str(value))
    except QuantityError:
        return str(value)
    return cores(amount) if fmt == CORES else memory(amount)


def _device(result: Object) -> PlannedDevice:
    consumed = result.get("consumedCapacity") or {}
    return PlannedDevice(
        pool=str(result["pool"]),
        device=str(result["device"]),
        cores=_amount(consumed, CORES, CORES),
        memory=_amount(consumed, MEMORY, MEMORY),
    )


def nomination_views(
    names: DriverNames,
    claims: Iterable[Object],
    pods: Iterable[Object],
    *,
    now: float,
    victims_read: bool = True,
) -> tuple[list[NominationView], list[str]]:
    """Return every unallocated claim's nomination, sorted, and the annotations that are bad.

    ``pods`` are looked up by namespace and name for the victims' states; ``victims_read``
    false says they could not be read (every victim is ``unknown``).
    """
    by_key = {(objects.namespace(pod), objects.name(pod)): pod for pod in pods}
    views, problems = [], []
    for claim, found in _unallocated_nominations(names, claims):
        key = f"{objects.namespace(claim)}/{objects.name(claim)}"
        if isinstance(found, NominationError):
            problems.append(f"claim {key}: {found}")
            continue
        views.append(
            NominationView(
                claim=key,
                pod=found.pod.key,
                node=found.node,
                devices=tuple(_device(result) for result in found.results),
                victims=tuple((v.key, _state(v, by_key, victims_read)) for v in found.victims),
                expires=found.expires,
                expired=found.expired(now),
            )
        )
    return sorted(views, key=lambda v: (v.pod, v.claim)), sorted(problems)


def nomination_json(view: NominationView) -> Object:
    """Return one nomination as the ``-o json`` document lists it."""
    return {
        "claim": view.claim,
        "pod": view.pod,
        "node": view.node,
        "devices": [
            {"pool": d.pool, "device": d.device, "cores": d.cores, "memory": d.memory}
            for d in view.devices
        ],
        "victims": [{"pod": pod, "state": state} for pod, state in view.victims],
        "expires": view.expires,
        "expired": view.expired,
    }


def _device_cell(device: PlannedDevice) -> str:
    if device.cores is None and device.memory is None:
        return f"{device.pool}/{device.device} (whole card)"
    amounts = [f"{device.cores} cores" if device.cores else "", device.memory or ""]
    return f"{device.pool}/{device.device} ({', '.join(a for a in amounts if a)})"


def nomination_lines(views: list[NominationView], problems: list[str]) -> list[str]:
    """Return the nominations table and the unreadable annotations; nothing without either."""
    lines: list[str] = []
    if views:
        rows = [["NOMINATED POD", "CLAIM", "NODE", "HOLDS", "EVICTING", "EXPIRES"]]
        for view in views:
            rows.append(
                [
                    view.pod,
                    view.claim,
                    view.node,
                    ", ".join(_device_cell(d) for d in view.devices),
                    ", ".join(f"{pod} ({state})" for pod, state in view.victims) or "-",
                    f"{view.expires} (expired)" if view.expired else view.expires,
                ]
            )
        lines += ["", *columns(rows)]
    if problems:
        lines += ["", "nominations the driver cannot read (ignored, they hold no room):"]
        lines += [f"  {problem}" for problem in problems]
    return lines
