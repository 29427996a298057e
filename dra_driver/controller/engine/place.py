"""The engine's entry point: where a pod's claims go, or why they cannot go anywhere.

A pure function of (snapshot, pod, claims, policy): no client, clock or I/O. Randomness (the
share IDs) is injected too, so a test can predict every byte of an allocation.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from dra_driver.controller.engine import explain, scoring
from dra_driver.controller.engine.matching import Matcher, Pick
from dra_driver.controller.engine.requests import ClaimRefused, ClaimSpec, claim_key, parse_claim
from dra_driver.controller.engine.search import (
    DEFAULT_STEP_BUDGET,
    Budget,
    BudgetExhausted,
    NodeSearch,
)
from dra_driver.controller.engine.snapshot import Device, Snapshot
from dra_driver.k8s.scheduling import node_selector_matches, node_unfit_reason

Object = dict[str, Any]


def node_selector(node: str) -> Object:
    """Return the allocation ``nodeSelector`` of node-local devices (dra-api.md §4.2)."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


@dataclasses.dataclass(frozen=True)
class ClaimAllocation:
    """What the controller writes into one claim's ``status.allocation``."""

    key: str
    uid: str
    node: str
    results: tuple[Object, ...]
    config: tuple[Object, ...]

    def status(self, allocation_timestamp: str) -> Object:
        """Return the ``status.allocation`` object, stamped with ``allocation_timestamp``."""
        return {
            "devices": {"results": list(self.results), "config": list(self.config)},
            "nodeSelector": node_selector(self.node),
            "allocationTimestamp": allocation_timestamp,
        }


@dataclasses.dataclass(frozen=True)
class Placed:
    """Every claim fits on ``node``."""

    node: str
    claims: tuple[ClaimAllocation, ...]


@dataclasses.dataclass(frozen=True)
class Unplaceable:
    """No node can take the claims now; ``refused`` means the claim itself must change."""

    reason: str
    refused: bool = False


def place_pod(
    snapshot: Snapshot,
    pod: Mapping[str, Any],
    claims: Sequence[Mapping[str, Any]],
    policy: scoring.Policy,
    *,
    pinned: Sequence[Object] = (),
    share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    budget: int = DEFAULT_STEP_BUDGET,
) -> Placed | Unplaceable:
    """Choose one node and devices for every claim of ``pod`` that this driver allocates.

    ``claims`` are the pod's unallocated claims of this driver; ``pinned`` are the
    ``nodeSelector``s of its claims that are already allocated (the pod must go where they
    are). The snapshot is not changed: commit a :class:`Placed` result once it is written.
    """
    specs = _parse(snapshot, claims)
    if isinstance(specs, Unplaceable):
        return specs
    matcher = Matcher(snapshot)
    steps = Budget(budget)
    reasons: list[str] = []
    closest: tuple[Fraction, str] | None = None
    best: tuple[tuple[object, ...], str, list[Pick]] | None = None
    for position, name in enumerate(sorted(snapshot.nodes)):
        node = snapshot.nodes[name]
        reason = node_unfit_reason(dict(pod), node)
        if reason is None and not all(node_selector_matches(s, node) for s in pinned):
            reason = "node didn't match the nodeSelector of the pod's allocated claims"
        if reason is None and not snapshot.devices.get(name):
            reason = f"node has no devices of {snapshot.names.driver}"
        if reason is not None:
            reasons.append(reason)
            continue
        search = NodeSearch(snapshot, matcher, name, specs, policy=policy, budget=steps)
        try:
            solution = search.solve()
        except BudgetExhausted:
            # The budget is per decision, so a pod whose search explodes cannot hold up the
            # pods queued behind it; the best node found so far still wins.
            unsearched = len(snapshot.nodes) - position
            reasons += [f"not searched: the search gave up after {budget} steps"] * unsearched
            break
        if solution is None:
            reason, near = _why_not(search, specs)
            reasons.append(reason)
            if near is not None and (closest is None or near[0] > closest[0]):
                closest = near
            continue
        picks, alternatives = solution
        free_after = _node_free_after(search, snapshot.devices[name])
        key = scoring.node_key(policy.node, alternatives, free_after, name)
        if best is None or key < best[0]:
            best = (key, name, picks)
    if best is None:
        message = explain.summarize(len(snapshot.nodes), reasons)
        if closest is not None:
            message += f" (closest: {closest[1]})"
        return Unplaceable(message)
    _, chosen, picks = best
    return Placed(
        chosen,
        tuple(_allocation(spec, i, chosen, picks, share_id) for i, spec in enumerate(specs)),
    )


def _parse(
    snapshot: Snapshot, claims: Sequence[Mapping[str, Any]]
) -> list[ClaimSpec] | Unplaceable:
    specs = []
    for claim in claims:
        try:
            specs.append(parse_claim(claim, snapshot.names, snapshot.classes))
        except ClaimRefused as exc:
            return Unplaceable(f"claim {claim_key(claim)}: {exc}", refused=True)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            # Not a shape the API server stores; refuse it rather than crash the loop.
            return Unplaceable(f"claim {claim_key(claim)}: malformed spec: {exc!s}", refused=True)
    return specs


def _node_free_after(search: NodeSearch, devices: Sequence[Device]) -> Fraction:
    fractions = []
    for device in devices:
        free = search.free(device)
        zero = dict.fromkeys(device.capacities, Fraction(0))
        fractions.append(scoring.free_fraction(device.capacities, zero if free is None else free))
    return sum(fractions, Fraction(0)) / len(fractions)


def _why_not(
    search: NodeSearch, specs: Sequence[ClaimSpec]
) -> tuple[str, tuple[Fraction, str] | None]:
    """Explain a failed node: a request nothing suits, one that no card has room for, or both."""
    if search.failures:
        label, detail = next(iter(search.failures.items()))
        return f"{label}: {detail}", None

    for spec in specs:
        for request in spec.requests:
            near: tuple[Fraction, str] | None = None
            text = ""
            for alternative in request.alternatives:
                fits, closest = search.room_for(alternative)
                if fits:
                    break
                if closest is not None:
                    device, wanted, free = closest
                    score = explain.closeness(wanted, free) if free is not None else Fraction(-1)
                    if near is None or score > near[0]:
                        near = (score, explain.closest_text(device, free))
                        text = explain.wanted_text(alternative, device, wanted)
            else:
                label = f"claim {spec.key} request {request.name}"
                return f"{label}: no {text or 'suitable card'}", near
    if search.shortages:
        label, detail = next(iter(search.shortages.items()))
        return f"{label}: {detail}", None
    return "the pod's requests cannot all be satisfied together (constraints or shared cards)", None


def _allocation(
    spec: ClaimSpec, index: int, node: str, picks: Sequence[Pick], share_id: Callable[[], str]
) -> ClaimAllocation:
    mine = [pick for pick in picks if pick.claim == index]
    config: list[Object] = []
    seen: set[str] = set()
    for pick in mine:
        if pick.alternative.name not in seen:
            seen.add(pick.alternative.name)
            config.extend(pick.alternative.class_config)
    config.extend({"source": "FromClaim", **entry} for entry in spec.claim_config)
    return ClaimAllocation(
        key=spec.key,
        uid=spec.uid,
        node=node,
        results=tuple(pick.result(share_id) for pick in mine),
        config=tuple(config),
    )
