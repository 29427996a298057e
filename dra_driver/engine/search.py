"""Find devices on one node for every request of a pod's claims: depth-first with backtracking.

Requests are taken in claim order, then request order, and pick devices from the best-ranked
card down (:mod:`scoring`): the first complete solution is the policy's choice. A dead end (a
constraint, or cards shared between requests) backtracks, so the search finds an allocation
whenever one exists, within a step budget for the worst case.

A ``firstAvailable`` request's alternatives are preferences: the choices of alternatives are
tried in order, each with the whole device search under it, so a later one is used only when
no placement of the other requests lets an earlier one fit (kube-scheduler's walk in slice
order can meet a later one first; this search still finds the earlier).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from dra_driver.engine import amounts, explain, scoring
from dra_driver.engine.budget import Budget
from dra_driver.engine.devices import Device, typed_value
from dra_driver.engine.matching import Matcher, Pick
from dra_driver.engine.requests import (
    MAX_RESULTS,
    Alternative,
    ClaimSpec,
    Constraint,
    results_after,
)
from dra_driver.engine.snapshot import Snapshot
from dra_driver.engine.tentative import Tentative
from dra_driver.structured.consumable import CapacityRejected


class NodeSearch:
    """Searches one node; :attr:`failures` explains a request that found nothing."""

    def __init__(
        self,
        snapshot: Snapshot,
        matcher: Matcher,
        node: str,
        claims: Sequence[ClaimSpec],
        *,
        policy: scoring.Policy,
        budget: Budget,
    ) -> None:
        self.snapshot = snapshot
        self.matcher = matcher
        self._node = node
        self._devices = snapshot.devices.get(node, ())
        self._claims = claims
        self._policy = policy
        self._budget = budget
        self._tentative = Tentative(snapshot)
        self._chosen_alternatives: list[int] = []
        self._fixed: tuple[int, ...] = ()
        """The alternative each request must use in the current pass of :meth:`solve`."""
        self._requests = [
            (index, f"claim {claim.key} request {request.name}", request.alternatives)
            for index, claim in enumerate(claims)
            for request in claim.requests
        ]
        self._rest: list[int] = []
        """Per request, the results the claim's later requests need (see :meth:`solve`)."""
        self._static: dict[int, tuple[list[tuple[Device, Any]], str | None]] = {}
        """Alternative (by identity: they live as long as the decision) -> its candidates."""
        self.failures: dict[str, str] = {}
        """Request label -> why no card could ever suit any of its alternatives here."""
        self.shortages: dict[str, str] = {}
        """Request label -> why too few cards could take it at this moment."""

    # -- availability --------------------------------------------------------------------

    def free(self, device: Device) -> dict[str, Fraction] | None:
        """Free capacity now (tentative picks included); ``None`` if used whole. Read only."""
        return self._tentative.free(device)

    def fraction(self, device: Device) -> Fraction:
        """Return the free fraction now, tentative picks included (see :mod:`scoring`)."""
        return self._tentative.fraction(device)

    def fits(
        self,
        device: Device,
        alternative: Alternative,
        consumed: Any,  # noqa: ANN401 - the matcher's consumption, or None
        claim: int = -1,
    ) -> bool:
        """Whether one pick of ``alternative`` fits the device now (this search's picks count).

        Admin access sees a card whoever uses it; only its own claim may not list it twice.
        """
        if alternative.admin:
            return not self._tentative.listed(claim, device)
        if consumed is None or alternative.exclusive:
            return not self._tentative.in_use(device)
        free = self.free(device)
        if free is not None and not self._tentative.touched(device):
            return self.snapshot.load.comparisons.fits(free, consumed)  # no pick of ours on it
        return free is not None and amounts.covers(free, consumed)

    def _had_room(self, device: Device, alternative: Alternative, consumed: Any) -> bool:  # noqa: ANN401
        """Whether the card belongs to "all": it could take the share before this search.

        An unshared device (``consumed`` is ``None``) always does; if it is in use, the
        request fails, as kube-scheduler's does.
        """
        if consumed is None or alternative.admin:
            return True
        if alternative.exclusive:
            return not self.snapshot.state.in_use(device.id)
        free = self.snapshot.load.free[device.id]
        return free is not None and self.snapshot.load.comparisons.fits(free, consumed)

    # -- constraints ----------------------------------------------------------------------

    def _constraints_allow(self, claim: int, alternative: Alternative, device: Device) -> bool:
        for constraint in self._claims[claim].constraints:
            if constraint.covers(alternative.name) and not self._constraint_allows(
                claim, constraint, device
            ):
                return False
        return True

    def _constraint_allows(self, claim: int, constraint: Constraint, device: Device) -> bool:
        if constraint.attribute not in device.attributes:
            return False
        # Typed, as kube-scheduler compares: true is not 1, a version is not a string.
        if device.attributes[constraint.attribute] is None:
            return False  # a value of no known type matches nothing, as upstream
        value = typed_value(device.attributes[constraint.attribute])
        others = [
            typed_value(p.device.attributes[constraint.attribute])
            for p in self._tentative.picks
            if p.claim == claim and constraint.covers(p.alternative.name)
        ]
        if constraint.distinct:
            return value not in others
        return all(other == value for other in others)

    # -- the search -----------------------------------------------------------------------

    def solve(self) -> tuple[list[Pick], tuple[int, ...]] | None:
        """Return the picks and the alternative index used per request, or ``None``.

        Raise :class:`BudgetExhausted` when the decision's step budget runs out.
        """
        usable: list[list[int]] = []
        for _, label, alternatives in self._requests:
            whys = [self.candidates(alternative)[1] for alternative in alternatives]
            if all(why is not None for why in whys):
                # No alternative has a card that could ever suit it here: say why, once.
                reasons = (f"{a.name}: {why}" for a, why in zip(alternatives, whys, strict=True))
                self.failures.setdefault(label, "; ".join(reasons))
                return None
            usable.append([index for index, why in enumerate(whys) if why is None])
        for self._fixed in itertools.product(*usable):
            self._rest = results_after(self._requests, self._fixed)
            if self._solve(0):
                return list(self._tentative.picks), tuple(self._chosen_alternatives)
        return None

    def _solve(self, at: int) -> bool:
        if at == len(self._requests):
            return True
        _, _, alternatives = self._requests[at]
        index = self._fixed[at]
        alternative = alternatives[index]
        candidates, _ = self.candidates(alternative)
        self._chosen_alternatives.append(index)
        if alternative.all_devices:
            found = self._take_all(at, alternative, candidates)
        else:
            found = self._take_some(at, alternative, candidates)
        if not found:
            self._chosen_alternatives.pop()
        return found

    def candidates(self, alternative: Alternative) -> tuple[list[tuple[Device, Any]], str | None]:
        """Devices that suit the request statically, each with its consumption.

        With none, also say why: the selectors, a taint or the request policy. Found once
        per alternative: explaining a failure asks again.
        """
        found = self._static.get(id(alternative))
        if found is None:
            found = self._static[id(alternative)] = self._suitable(alternative)
        return found

    def _suitable(self, alternative: Alternative) -> tuple[list[tuple[Device, Any]], str | None]:
        suitable = []
        reasons: list[str] = []
        for device in self._devices:
            failure = self.matcher.selector_failure(alternative.selectors, device)
            failure = failure or self.matcher.taint_failure(alternative, device)
            if failure is not None:
                reasons.append(f"{device.name} {failure}")
                continue
            try:
                consumed = self.matcher.consumption(alternative, device)
            except CapacityRejected as exc:
                reasons.append(f"{device.name}: {exc}")
                continue
            suitable.append((device, consumed))
        if suitable:
            return suitable, None
        return suitable, "; ".join(reasons) or "the node has no device of this driver"

    def _ranked(
        self, claim: int, alternative: Alternative, candidates: list[tuple[Device, Any]]
    ) -> list[tuple[Device, Any]]:
        """Candidates that fit now, best first for this share's placement."""
        placement = self._policy.for_share(alternative.config)
        ranked = []
        for device, consumed in candidates:
            if not self.fits(device, alternative, consumed, claim):
                continue
            if consumed is None:
                after = Fraction(0)
            else:
                # Consumption succeeded on this device, so its model's delta is known.
                delta = self.matcher.delta(alternative, device.model) or Fraction(0)
                after = self.fraction(device) - delta
            key = scoring.card_key(
                placement,
                alternative.config.priority,
                free_after=after,
                hosts_online=self._tentative.hosts_online(device),
                sort_key=device.sort_key,
            )
            ranked.append((key, device, consumed))
        ranked.sort(key=lambda item: item[0])
        return [(device, consumed) for _, device, consumed in ranked]

    def _take_some(
        self, at: int, alternative: Alternative, candidates: list[tuple[Device, Any]]
    ) -> bool:
        claim, label, _ = self._requests[at]
        if self._too_many(claim, label, alternative, adding=alternative.count, at=at):
            return False
        ranked = self._ranked(claim, alternative, candidates)
        if len(ranked) < alternative.count:
            self.shortages.setdefault(
                label,
                f"{alternative.name}: needs {alternative.count} cards, "
                f"{len(ranked)} can take the share now",
            )
            return False
        return self._take(claim, alternative, ranked, start=0, remaining=alternative.count, at=at)

    def _too_many(
        self, claim: int, label: str, alternative: Alternative, *, adding: int, at: int
    ) -> bool:
        """Whether ``adding`` results, and the least the claim's later requests need, pass 32.

        Saying so before picking lets a ``firstAvailable`` request fall back to an alternative
        that needs fewer devices, as kube-scheduler does, without trying every set of cards.
        """
        total = adding + sum(1 for pick in self._tentative.picks if pick.claim == claim)
        if total + self._rest[at] <= MAX_RESULTS:
            return False
        total += self._rest[at]
        self.shortages.setdefault(
            label,
            f"{alternative.name}: the claim would list {total} devices, and an allocation "
            f"can list at most {MAX_RESULTS}",
        )
        return True

    def _take(
        self,
        claim: int,
        alternative: Alternative,
        ranked: list[tuple[Device, Any]],
        *,
        start: int,
        remaining: int,
        at: int,
    ) -> bool:
        """Pick ``remaining`` more cards from ``ranked[start:]``, then solve the rest.

        One request never takes a card twice (``count: 2`` means two cards), and the cards it
        takes do not change how the others rank, so picking in ranked order tries each set of
        cards once instead of each ordering of it.
        """
        if remaining == 0:
            return self._solve(at + 1)
        for index in range(start, len(ranked) - remaining + 1):
            device, consumed = ranked[index]
            self._budget.step()
            if not self._constraints_allow(claim, alternative, device):
                continue
            self._tentative.push(Pick(claim, alternative, device, consumed))
            if self._take(
                claim, alternative, ranked, start=index + 1, remaining=remaining - 1, at=at
            ):
                return True
            self._tentative.pop()
        return False

    def _take_all(
        self, at: int, alternative: Alternative, candidates: list[tuple[Device, Any]]
    ) -> bool:
        claim, label, _ = self._requests[at]
        if not candidates:
            return False
        unusable = self.snapshot.unusable_pools.get(self._node)
        if unusable:
            self.shortages.setdefault(
                label,
                f"{alternative.name}: allocationMode All needs every card, but "
                + explain.unusable_text(unusable),
            )
            return False
        # kube-scheduler decides what "all" is before it picks anything: every matching card
        # whose free capacity, before this pod's picks, can take the share. Cards without
        # that room are left out; one the pod's own earlier picks filled is a dead end.
        candidates = [(d, c) for d, c in candidates if self._had_room(d, alternative, c)]
        if not candidates:
            self.shortages.setdefault(
                label, f"{alternative.name}: allocationMode All, but no matching card has room"
            )
            return False
        if self._too_many(claim, label, alternative, adding=len(candidates), at=at):
            return False
        pushed = 0
        for device, consumed in candidates:
            self._budget.step()
            if not self.fits(device, alternative, consumed, claim) or not self._constraints_allow(
                claim, alternative, device
            ):
                self.shortages.setdefault(
                    label, f"{alternative.name}: allocationMode All, but {device.name} is full"
                )
                break
            self._tentative.push(Pick(claim, alternative, device, consumed))
            pushed += 1
        else:
            if self._solve(at + 1):
                return True
        for _ in range(pushed):
            self._tentative.pop()
        return False
