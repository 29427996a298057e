"""One decision's visits to nodes, and why it failed when no node fits.

:func:`~dra_driver.engine.place.place_pod` asks :class:`Scan` to search nodes in
:mod:`order`. A node is ruled out cheaply first (its scheduling constraints, then a summary of
its free capacity), and only then searched card by card.

Why a node cannot take the pod's claims depends only on the claims' specs and the node's load,
so it is remembered in the snapshot per node version and claim specs: the next pod with the
same claims (the usual case: pods of one template, or one pod retried) skips every node that
has not changed since. Remembered reasons name claims by placeholders, filled in per pod.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

from dra_driver.engine import amounts, explain, scoring
from dra_driver.engine.budget import Budget, BudgetExhausted
from dra_driver.engine.devices import Device
from dra_driver.engine.matching import Matcher, Pick
from dra_driver.engine.requests import Alternative, ClaimSpec
from dra_driver.engine.search import NodeSearch
from dra_driver.engine.snapshot import Snapshot
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.scheduling import node_selector_matches, node_unfit_reason

NodeKey = tuple[tuple[int, ...], Fraction, str]
Near = tuple[float, Device, dict[str, Fraction] | None]
"""The closest card to a request that fits nowhere: how close, the card, its free capacity."""
Failure = tuple[str, Near | None]

EXPLAIN_BUDGET: Final = 1_000
"""Search steps to explain one node the scan skipped (it cannot fit; the steps find why)."""
_SPECS_REMEMBERED: Final = 64
"""Distinct claim specs whose per-node failures a snapshot keeps (least recent go)."""


def gave_up(steps: int) -> str:
    """Return the reason of a node a decision did not search because its budget ran out."""
    return f"not searched: the search gave up after {steps} steps"


def _placeholder(index: int) -> str:
    return f"\x00claim-{index}\x00"


NodeFit = Callable[[Object], str | None]
"""Why a node (the Node object) has no room for the pod's own needs, or ``None``."""


class Scan:
    """Searches nodes for one decision and remembers why each failed."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        pod: Mapping[str, Any],
        claims: Sequence[Mapping[str, Any]],
        specs: Sequence[ClaimSpec],
        policy: scoring.Policy,
        pinned: Sequence[Object],
        budget: Budget,
        node_fit: NodeFit | None = None,
    ) -> None:
        self.snapshot = snapshot
        self._node_fit = node_fit
        self.matcher = Matcher(snapshot)
        self.exhausted = False
        self._pod = dict(pod)
        self._keys = [spec.key for spec in specs]
        self._specs = [
            dataclasses.replace(spec, key=_placeholder(index)) for index, spec in enumerate(specs)
        ]
        self._policy = policy
        self._pinned = pinned
        self._budget = budget
        self._failed: dict[str, Failure] = {}
        spec = objects.spec(self._pod)
        signature = json.dumps(
            {
                "claims": [claim.get("spec") for claim in claims],
                # What node_unfit_reason reads: with it, a node's whole reason is reusable.
                "pod": {key: spec.get(key) for key in ("nodeSelector", "affinity", "tolerations")},
                "pinned": list(pinned),
            },
            sort_keys=True,
            default=str,
        )
        remembered: OrderedDict[str, dict[str, tuple[int, Failure]]] = snapshot.memo.setdefault(
            "failures", OrderedDict()
        )
        if signature in remembered:
            remembered.move_to_end(signature)
        elif len(remembered) >= _SPECS_REMEMBERED:
            remembered.popitem(last=False)
        self._remembered = remembered.setdefault(signature, {})

    def solve(self, name: str, *, skim: bool = True) -> tuple[NodeKey, list[Pick]] | None:
        """Search one node: its rank key and picks, or ``None``.

        Why it failed is kept, unless ``skim`` let a summary of the node rule it out.
        """
        # The pods on a node change without the snapshot knowing: never remembered.
        node = self.snapshot.nodes.get(name)
        unfit = self._node_fit(node) if self._node_fit and node is not None else None
        if unfit is not None:
            self._failed[name] = (unfit, None)
            return None
        version = self.snapshot.load.version.get(name, 0)
        known = self._remembered.get(name)
        if known is not None and known[0] == version:
            self._failed[name] = known[1]
            return None
        # A summary of the node's free capacity rules most nodes out cheaply; it records no
        # reason, so an explanation visits the node again without it.
        if skim and not self._may_fit(name):
            return None
        reason = self._unfit(name)
        if reason is not None:
            self._remember(name, version, (reason, None))
            return None
        search = NodeSearch(
            self.snapshot, self.matcher, name, self._specs, policy=self._policy, budget=self._budget
        )
        solution = search.solve()
        if solution is None:
            reason, near = _why_not(search, self._specs)
            unusable = self.snapshot.unusable_pools.get(name)
            if unusable:  # kube-scheduler reports these when nothing else fits
                reason = f"{reason} (not used: {explain.unusable_text(unusable)})"
            self._remember(name, version, (reason, near))
            return None
        picks, alternatives = solution
        devices = self.snapshot.devices[name]
        free_after = sum((search.fraction(d) for d in devices), Fraction(0)) / len(devices)
        return scoring.node_key(self._policy.node, alternatives, free_after, name), picks

    def ruled_out(self, name: str) -> bool:
        """Whether what this snapshot already learnt says the node cannot take the claims."""
        known = self._remembered.get(name)
        if known is not None and known[0] == self.snapshot.load.version.get(name, 0):
            return True
        return not all(
            any(
                self.matcher.known_selected(alternative.selectors, name) is not False
                for alternative in request.alternatives
            )
            for spec in self._specs
            for request in spec.requests
        )

    def _remember(self, name: str, version: int, failure: Failure) -> None:
        self._failed[name] = failure
        self._remembered[name] = (version, failure)

    def unplaceable(self) -> str:
        """Explain why no node fits, visiting the nodes the ordered scan skipped."""
        reasons: list[str] = []
        closest: Near | None = None
        # Every node, so the loop is kept lean: it runs for each failed decision.
        failed, remembered, version = self._failed, self._remembered, self.snapshot.load.version
        for name in self.snapshot.node_names:
            failure = failed.get(name)
            if failure is None:
                if self.exhausted:
                    reasons.append(gave_up(self._budget.limit))
                    continue
                known = remembered.get(name)
                if known is not None and known[0] == version.get(name, 0):
                    failure = failed[name] = known[1]
                else:
                    self._explain(name)
                    failure = failed[name]
            reasons.append(failure[0])
            near = failure[1]
            if near is not None and (closest is None or near[0] > closest[0]):
                closest = near
        message = explain.summarize(len(self.snapshot.nodes), reasons)
        if closest is not None:
            _, device, free = closest
            message += f" (closest: {explain.closest_text(device, free)})"
        for index, key in enumerate(self._keys):
            message = message.replace(_placeholder(index), key)
        return message

    def _unfit(self, name: str) -> str | None:
        node = self.snapshot.nodes.get(name)
        if node is None:  # a deleted node's slices are garbage-collected a little later
            return "node not found"
        reason = node_unfit_reason(self._pod, node)
        if reason is None and not all(node_selector_matches(s, node) for s in self._pinned):
            reason = "node didn't match the nodeSelector of the pod's allocated claims"
        if reason is None and not self.snapshot.devices.get(name):
            reason = f"node has no devices of {self.snapshot.names.driver}"
            unusable = self.snapshot.unusable_pools.get(name)
            if unusable:
                reason = f"{reason} that may be used ({explain.unusable_text(unusable)})"
        return reason

    def _may_fit(self, name: str) -> bool:
        """Whether the node's summary leaves room for every request (necessary, not enough)."""
        load = self.snapshot.load
        idle, room = load.idle[name], load.room[name]
        models = [model for model, _ in load.shape_of[name]]
        devices = self.snapshot.devices[name]
        return all(
            any(
                self.matcher.any_selected(alternative.selectors, name, devices)
                and any(self.matcher.may_fit(alternative, model, idle, room) for model in models)
                for alternative in request.alternatives
            )
            for spec in self._specs
            for request in spec.requests
        )

    def _explain(self, name: str) -> None:
        """Search a node the scan skipped, which cannot fit, only to learn why."""
        budget, self._budget = self._budget, Budget(EXPLAIN_BUDGET)
        try:
            self.solve(name, skim=False)
        except BudgetExhausted:
            self._failed[name] = (gave_up(EXPLAIN_BUDGET), None)
        finally:
            self._budget = budget


def _why_not(search: NodeSearch, specs: Sequence[ClaimSpec]) -> Failure:
    """Explain a failed node: a request nothing suits, one that no card has room for, or both."""
    if search.failures:
        label, detail = next(iter(search.failures.items()))
        return f"{label}: {detail}", None

    for spec in specs:
        for request in spec.requests:
            near: Near | None = None
            text = ""
            for alternative in request.alternatives:
                fits, closest = _room_for(search, alternative)
                if fits:
                    break
                if closest is not None:
                    score, device, wanted, free = closest
                    if near is None or score > near[0]:
                        near = (score, device, free)
                        text = explain.wanted_text(alternative, device, wanted)
            else:
                label = f"claim {spec.key} request {request.name}"
                return f"{label}: no {text or 'suitable card'}", near
    if search.shortages:
        label, detail = next(iter(search.shortages.items()))
        return f"{label}: {detail}", None
    return "the pod's requests cannot all be satisfied together (constraints or shared cards)", None


Closest = tuple[float, Device, dict[str, Fraction], dict[str, Fraction] | None]
"""The closest card to a share that fits nowhere: how close, the card, the share, its free."""


def _room_for(search: NodeSearch, alternative: Alternative) -> tuple[bool, Closest | None]:
    """Whether one share fits some card of the node now; if not, the closest card.

    How close is :func:`amounts.closeness`; a card used whole is the farthest (-1).
    """
    load = search.snapshot.load
    best: Closest | None = None
    for device, consumed in search.candidates(alternative)[0]:
        if search.fits(device, alternative, consumed):
            return True, None
        wanted = consumed or search.matcher.whole(device.model)
        free = search.free(device)
        if free is None:
            close = -1.0
        elif free is load.free[device.id]:  # interned: the answer may be remembered
            close = load.comparisons.closeness(wanted, free)
        else:
            close = amounts.closeness(wanted, free)
        if best is None or close > best[0]:
            best = (close, device, wanted, free)
    return False, best
