"""The engine's entry point: where a pod's claims go, or why they cannot go anywhere.

A pure function of (snapshot, pod, claims, policy): no client, clock or I/O. Randomness (the
share IDs) is injected too, so a test can predict every byte of an allocation.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dra_driver.engine import order, scoring
from dra_driver.engine.budget import DEFAULT_STEP_BUDGET, Budget, BudgetExhausted
from dra_driver.engine.matching import Pick
from dra_driver.engine.requests import ClaimRefused, ClaimSpec, claim_key, parse_claim
from dra_driver.engine.scan import NodeFit, NodeKey, Scan
from dra_driver.engine.snapshot import Snapshot
from dra_driver.k8s.objects import Object


def node_selector(node: str) -> Object:
    """Return the allocation ``nodeSelector`` of node-local devices: the node, by name.

    The form kube-scheduler writes for them, a ``matchFields`` term on ``metadata.name``.
    """
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
    node_fit: NodeFit | None = None,
) -> Placed | Unplaceable:
    """Choose one node and devices for every claim of ``pod`` that this driver allocates.

    ``claims`` are the pod's unallocated claims of this driver; ``pinned`` are the
    ``nodeSelector``s of its claims that are already allocated (the pod must go where they
    are); ``node_fit`` says why a node has no room for the pod's own needs (CPU, memory, pod
    count, host ports), or ``None``. The snapshot is not changed: commit a :class:`Placed`
    result once it is written.
    """
    specs = _parse(snapshot, claims)
    if isinstance(specs, Unplaceable):
        return specs
    scan = Scan(
        snapshot,
        pod=pod,
        claims=claims,
        specs=specs,
        policy=policy,
        pinned=pinned,
        budget=Budget(budget),
        node_fit=node_fit,
    )
    best: tuple[NodeKey, list[Pick]] | None = None
    try:
        for bound, name in order.visit_order(
            snapshot.load, specs, scan.matcher, policy.node, scan.ruled_out
        ):
            # With every request on its first alternative, the best can only be beaten by a
            # better fill (or an equal one and an earlier name), and the bounds ascend.
            if (
                best is not None
                and bound is not None
                and not any(best[0][0])
                and (bound, name) > best[0][1:]
            ):
                break
            found = scan.solve(name)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
    except BudgetExhausted:
        # The budget is per decision, so a pod whose search explodes cannot hold up the pods
        # queued behind it; the best node found so far still wins.
        scan.exhausted = True
    if best is None:
        return Unplaceable(scan.unplaceable())
    (_, _, chosen), picks = best
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
