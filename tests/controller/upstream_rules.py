"""kube-scheduler's structured allocator, ported small: the oracle the engine is checked against.

It follows the 1.36 allocator's rules for one driver and node-local slices, written on its own
(it shares only the CEL evaluator and the request-policy arithmetic with the engine):

- pools are gathered for the node: its slices at their newest generation; fewer than
  ``resourceSliceCount`` of them is settled by the other nodes' slices (a newer generation:
  ignored; too few of this one: incomplete); a device name listed twice makes a pool invalid;
  incomplete and invalid pools give no device, and an ``All`` request anywhere in the claim
  fails while the node has one;
- candidates are tried in pool, slice, device order; a device suits a request when it passes
  the class's selectors, then the request's, and its capacity takes the request on top of
  what is allocated and what this attempt allocates; an unshared device is used once;
- ``All`` is fixed before the search: the devices that suit and have room then;
- ``firstAvailable`` alternatives are tried in order; constraints compare typed values;
- a claim lists at most 32 devices.

The search is exhaustive and the first solution wins. It is slow on purpose: a test oracle.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from dra_driver.k8s.quantity import parse_quantity
from dra_driver.structured import cel
from dra_driver.structured.consumable import (
    Capacity,
    CapacityRejected,
    consumed_capacity,
    parse_capacities,
)

Object = dict[str, Any]
MAX_RESULTS = 32
_KINDS = ("int", "bool", "string", "version")


@dataclasses.dataclass(frozen=True)
class Dev:
    """A device the node may use."""

    pool: str
    name: str
    capacities: dict[str, Capacity]
    shareable: bool
    attributes: dict[str, tuple[str, object]]
    variable: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Node:
    """What one node offers a claim: its usable devices and the cluster's allocations."""

    driver: str
    devices: list[Dev]
    unusable: bool
    """Whether some pool of the node is incomplete or invalid."""
    classes: dict[str, Object]
    allocated: list[Object]


@dataclasses.dataclass(frozen=True)
class Alt:
    """One way to satisfy a request: ``name`` is what a result records."""

    request: str
    name: str
    entry: Object


@dataclasses.dataclass(frozen=True)
class Found:
    """A solution: the results and the alternative each request took."""

    results: list[Object]
    alternatives: tuple[int, ...]


def gather(
    driver: str,
    node: str,
    slices: list[Object],
    classes: dict[str, Object],
    allocated: list[Object],
) -> Node:
    """Return what ``node`` offers: the devices it may use, and whether a pool is unusable."""
    relevant: dict[str, list[Object]] = {}
    for slice_ in slices:
        spec = slice_["spec"]
        if spec["driver"] != driver or spec.get("nodeName") != node:
            continue
        held = relevant.get(spec["pool"]["name"])
        if not held or _generation(slice_) > _generation(held[0]):
            relevant[spec["pool"]["name"]] = [slice_]
        elif _generation(slice_) == _generation(held[0]):
            held.append(slice_)
    devices: list[Dev] = []
    unusable = False
    for pool, held in relevant.items():
        generation, count = _generation(held[0]), held[0]["spec"]["pool"]["resourceSliceCount"]
        if len(held) != count:
            everywhere = [
                s
                for s in slices
                if s["spec"]["driver"] == driver and s["spec"]["pool"]["name"] == pool
            ]
            if any(_generation(s) > generation for s in everywhere):
                continue
            if sum(_generation(s) == generation for s in everywhere) != count:
                unusable = True
                continue
        raw = [device for s in held for device in s["spec"]["devices"]]
        if len({d["name"] for d in raw}) != len(raw):
            unusable = True
            continue
        devices += [_dev(driver, pool, d) for d in raw]
    return Node(driver, devices, unusable, classes, allocated)


def allocate(node: Node, claim: Object) -> Found | None:
    """Return upstream's first solution for one claim on the node, or ``None``."""
    requests = [_alternatives(r) for r in claim["spec"]["devices"]["requests"]]
    entries = [alt.entry for alts in requests for alt in alts]
    if node.unusable and any(e.get("allocationMode") == "All" for e in entries):
        return None
    search = _Search(node, claim)
    least = sum(min(search.static_count(a) for a in alts) for alts in requests)
    if least > MAX_RESULTS:
        return None
    return search.solve(requests, 0, [], ())


def judge(node: Node, claim: Object, results: list[Object]) -> str | None:
    """Return why upstream's rules would not accept ``results`` for the claim, or ``None``."""
    requests = claim["spec"]["devices"]["requests"]
    if node.unusable and any(
        alt.entry.get("allocationMode") == "All" for r in requests for alt in _alternatives(r)
    ):
        return "an All request on a node with an incomplete or invalid pool"
    if len(results) > MAX_RESULTS:
        return f"{len(results)} results"
    search = _Search(node, claim)
    done: list[Object] = []
    for request in requests:
        mine = [r for r in results if r["request"].split("/")[0] == request["name"]]
        problem = search.replay(request, mine, done)
        if problem is not None:
            return problem
    return None


def _consumed(result: Object) -> dict[str, Fraction]:
    return {k: parse_quantity(v) for k, v in (result.get("consumedCapacity") or {}).items()}


def _generation(slice_: Object) -> int:
    return int(slice_["spec"]["pool"]["generation"])


def _dev(driver: str, pool: str, raw: Object) -> Dev:
    attributes = {}
    for name, value in (raw.get("attributes") or {}).items():
        kind = next(k for k in _KINDS if k in value)
        attributes[name if "/" in name else f"{driver}/{name}"] = (kind, value[kind])
    return Dev(
        pool=pool,
        name=raw["name"],
        capacities=parse_capacities(raw),
        shareable=bool(raw.get("allowMultipleAllocations")),
        attributes=attributes,
        variable=cel.device_variable(driver, raw),
    )


def _alternatives(request: Object) -> list[Alt]:
    if request.get("exactly") is not None:
        return [Alt(request["name"], request["name"], request["exactly"])]
    return [
        Alt(request["name"], f"{request['name']}/{sub['name']}", sub)
        for sub in request["firstAvailable"]
    ]


class _Search:
    def __init__(self, node: Node, claim: Object) -> None:
        self._devices, self._classes, allocated = node.devices, node.classes, node.allocated
        self._by_key = {(d.pool, d.name): d for d in self._devices}
        self._constraints = claim["spec"]["devices"].get("constraints") or []
        self._used: dict[tuple[str, str], dict[str, Fraction]] = {}
        self._whole: set[tuple[str, str]] = set()
        for other in allocated:
            for result in other["status"]["allocation"]["devices"]["results"]:
                key = (result["pool"], result["device"])
                if not result.get("shareID"):
                    self._whole.add(key)
                for name, text in (result.get("consumedCapacity") or {}).items():
                    totals = self._used.setdefault(key, {})
                    totals[name] = totals.get(name, Fraction(0)) + parse_quantity(text)
        self._all: dict[str, list[tuple[Dev, dict[str, Fraction]]]] = {}

    def static_count(self, alt: Alt) -> int:
        if alt.entry.get("allocationMode") != "All":
            return int(alt.entry.get("count") or 1)
        self._all[alt.name] = [
            (d, consumed)
            for d in self._devices
            if self.selectable(alt, d) and (consumed := self._room(alt, d, [])) is not None
        ]
        return len(self._all[alt.name])

    def replay(self, request: Object, mine: list[Object], done: list[Object]) -> str | None:
        """Check one request's results after ``done``; on success append them to ``done``."""
        alts = {alt.name: alt for alt in _alternatives(request)}
        if len({r["request"] for r in mine}) != 1 or mine[0]["request"] not in alts:
            return f"request {request['name']}: results {mine}"
        alt = alts[mine[0]["request"]]
        chosen = [self._by_key[k] for r in mine if (k := (r["pool"], r["device"])) in self._by_key]
        expected = int(alt.entry.get("count") or 1)
        if alt.entry.get("allocationMode") == "All":
            self.static_count(alt)
            every = {(d.pool, d.name) for d in self.all_of(alt)}
            if {(d.pool, d.name) for d in chosen} != every:
                return f"request {alt.name}: not every device with room"
            expected = len(every)
        if len(chosen) != expected or not all(self.selectable(alt, d) for d in chosen):
            return f"request {alt.name}: {len(chosen)} devices, or one not selectable"
        picked = self.extend(alt, done, chosen)
        if picked is None:
            return f"request {alt.name}: no room, or a constraint broken"
        done += picked
        return next(
            (
                f"request {alt.name}: consumed {given}, upstream {reference.get('consumed')}"
                for result, reference in zip(mine, picked, strict=True)
                if (given := _consumed(result)) != reference.get("consumed", {})
            ),
            None,
        )

    def all_of(self, alt: Alt) -> list[Dev]:
        return [d for d, _ in self._all[alt.name]]

    def solve(
        self, requests: list[list[Alt]], at: int, results: list[Object], chosen: tuple[int, ...]
    ) -> Found | None:
        if at == len(requests):
            return Found(list(results), chosen)
        for index, alt in enumerate(requests[at]):
            for picked in self._choices(alt, results):
                if len(results) + len(picked) > MAX_RESULTS:
                    break
                found = self.solve(requests, at + 1, results + picked, (*chosen, index))
                if found is not None:
                    return found
        return None

    def _choices(self, alt: Alt, results: list[Object]) -> Iterator[list[Object]]:
        if alt.entry.get("allocationMode") == "All":
            every = self._all[alt.name]
            if every:
                picked = self.extend(alt, results, [d for d, _ in every])
                if picked is not None:
                    yield picked
            return
        suitable = [d for d in self._devices if self.selectable(alt, d)]
        for combination in itertools.combinations(suitable, int(alt.entry.get("count") or 1)):
            picked = self.extend(alt, results, list(combination))
            if picked is not None:
                yield picked

    def extend(self, alt: Alt, results: list[Object], devices: list[Dev]) -> list[Object] | None:
        """Results for ``devices`` one after the other, or ``None`` when one does not fit."""
        picked: list[Object] = []
        for device in devices:
            consumed = self._room(alt, device, results + picked)
            if consumed is None or not self._constraints_hold(alt, device, results + picked):
                return None
            result: Object = {"request": alt.name, "pool": device.pool, "device": device.name}
            if device.shareable:
                result["consumed"] = consumed
            picked.append(result)
        return picked

    def selectable(self, alt: Alt, device: Dev) -> bool:
        class_spec = self._classes[alt.entry["deviceClassName"]]["spec"]
        selectors = [*(class_spec.get("selectors") or []), *(alt.entry.get("selectors") or [])]
        return all(
            cel.compile_selector(s["cel"]["expression"]).matches(device.variable) for s in selectors
        )

    def _room(self, alt: Alt, device: Dev, results: list[Object]) -> dict[str, Fraction] | None:
        """Return what one share takes of ``device`` if it has room now, else ``None``."""
        key = (device.pool, device.name)
        mine = [r for r in results if (r["pool"], r["device"]) == key]
        if not device.shareable and (key in self._whole or key in self._used or mine):
            return None
        if device.shareable and key in self._whole:
            return None
        requests = {
            name: parse_quantity(text)
            for name, text in ((alt.entry.get("capacity") or {}).get("requests") or {}).items()
        }
        try:
            consumed = consumed_capacity(device.capacities, requests)
        except CapacityRejected:
            return None
        for name, amount in consumed.items():
            taken = self._used.get(key, {}).get(name, Fraction(0))
            taken += sum(r.get("consumed", {}).get(name, Fraction(0)) for r in mine)
            if taken + amount > device.capacities[name].value:
                return None
        return consumed

    def _constraints_hold(self, alt: Alt, device: Dev, results: list[Object]) -> bool:
        for constraint in self._constraints:
            names = constraint.get("requests") or []
            if names and alt.request not in names and alt.name not in names:
                continue
            attribute = constraint.get("matchAttribute") or constraint["distinctAttribute"]
            value = device.attributes.get(attribute)
            if value is None:
                return False
            others = [
                self._by_key[(r["pool"], r["device"])].attributes.get(attribute)
                for r in results
                if not names or r["request"] in names or r["request"].split("/")[0] in names
            ]
            if constraint.get("matchAttribute") and any(o != value for o in others):
                return False
            if constraint.get("distinctAttribute") and value in others:
                return False
        return True
