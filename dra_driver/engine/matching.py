"""What a device offers one request, checked once per snapshot, and what a pick records.

Static checks (selectors, device taints, the request policy) do not depend on what else is
allocated, so the :class:`Matcher` memoizes them in the snapshot, across decisions: selector
results per device, consumption per device model. The search only re-checks free capacity.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Final

from dra_driver.engine.devices import Device
from dra_driver.engine.load import Model
from dra_driver.engine.requests import Alternative
from dra_driver.engine.scoring import free_fraction
from dra_driver.engine.snapshot import Snapshot
from dra_driver.k8s.objects import Object
from dra_driver.k8s.scheduling import tolerates
from dra_driver.structured import cel
from dra_driver.structured.allocated import DeviceId
from dra_driver.structured.consumable import (
    Capacity,
    CapacityRejected,
    check_within,
    consumed_capacity,
    format_consumed,
)

_BLOCKING_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
_SELECTORS_REMEMBERED: Final = 256
"""Distinct selector expressions whose per-device results a snapshot keeps (least recent go)."""


class _Rejected(str):
    """A remembered :class:`CapacityRejected` message (a new exception is raised each time)."""

    __slots__ = ()


Consumption = dict[str, Fraction] | None | _Rejected
_AMOUNTS_REMEMBERED: Final = 20_000
"""Consumption and delta entries a snapshot keeps before it forgets them all."""


@dataclasses.dataclass(frozen=True)
class Pick:
    """One device chosen for one request."""

    claim: int
    alternative: Alternative
    device: Device
    consumed: dict[str, Fraction] | None
    """Capacity taken; ``None`` for a device that is not shareable (used whole, no share)."""

    def result(self, share_id: Callable[[], str]) -> Object:
        """Return the ``DeviceRequestAllocationResult`` of this pick."""
        driver, pool, device = self.device.id
        result: Object = {
            "request": self.alternative.name,
            "driver": driver,
            "pool": pool,
            "device": device,
        }
        if self.alternative.tolerations:
            result["tolerations"] = [dict(t) for t in self.alternative.tolerations]
        if self.alternative.admin:
            # Seen, not shared out: no share of the card, and nobody counts it.
            result["adminAccess"] = True
        # A whole-only card's share is counted by its config: the API server would drop both.
        elif self.consumed is not None and self.device.shareable:
            result["shareID"] = share_id()
            result["consumedCapacity"] = format_consumed(self.device.capacities, self.consumed)
        return result


class Matcher:
    """Static device checks (selectors, taints, request policy), memoized in the snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        memo = snapshot.memo
        self._selectors: OrderedDict[str, dict[DeviceId, str | None]] = memo.setdefault(
            "selectors", OrderedDict()
        )
        self._consumption: dict[tuple[object, ...], Consumption] = memo.setdefault(
            "consumption", {}
        )
        self._deltas: dict[tuple[object, ...], Fraction | None] = memo.setdefault("deltas", {})
        self._whole: dict[Model, dict[str, Fraction]] = memo.setdefault("whole", {})
        if len(self._consumption) + len(self._deltas) > _AMOUNTS_REMEMBERED:
            # Keyed by requested amounts, which claims choose freely: start over, not grow.
            self._consumption.clear()
            self._deltas.clear()
        self._node_selections: OrderedDict[tuple[str, ...], dict[str, bool]] = memo.setdefault(
            "node_selections", OrderedDict()
        )
        # Keyed by the alternative's identity: cheaper to hash than its amounts, and the
        # alternatives live as long as this decision.
        self._local: dict[tuple[int, Model], Consumption] = {}
        self._local_deltas: dict[tuple[int, Model], Fraction | None] = {}

    def selector_failure(self, selectors: Sequence[cel.Selector], device: Device) -> str | None:
        """Return why the device fails a selector (a runtime error counts), or ``None``."""
        for selector in selectors:
            results = self._selector_results(selector.expression)
            if device.id not in results:
                try:
                    ok = selector.matches(device.variable)
                    results[device.id] = None if ok else "does not match the selectors"
                except cel.CelEvaluationError as exc:
                    results[device.id] = str(exc)
            failure = results[device.id]
            if failure is not None:
                return failure
        return None

    def any_selected(
        self, selectors: Sequence[cel.Selector], node: str, devices: Sequence[Device]
    ) -> bool:
        """Whether any of a node's devices passes every selector (remembered per node)."""
        if not selectors:
            return True
        key = tuple(selector.expression for selector in selectors)
        nodes = self._node_selections.get(key)
        if nodes is None:
            if len(self._node_selections) >= _SELECTORS_REMEMBERED:
                self._node_selections.popitem(last=False)
            nodes = self._node_selections[key] = {}
        else:
            self._node_selections.move_to_end(key)
        if node not in nodes:
            nodes[node] = any(self.selector_failure(selectors, d) is None for d in devices)
        return nodes[node]

    def known_selected(self, selectors: Sequence[cel.Selector], node: str) -> bool | None:
        """Return what :meth:`any_selected` found for the node, or ``None`` if not asked yet."""
        if not selectors:
            return True
        nodes = self._node_selections.get(tuple(selector.expression for selector in selectors))
        return None if nodes is None else nodes.get(node)

    def _selector_results(self, expression: str) -> dict[DeviceId, str | None]:
        results = self._selectors.get(expression)
        if results is None:
            # Claims can carry any expression; bound what a long-lived snapshot remembers.
            if len(self._selectors) >= _SELECTORS_REMEMBERED:
                self._selectors.popitem(last=False)
            results = self._selectors[expression] = {}
        else:
            self._selectors.move_to_end(expression)
        return results

    @staticmethod
    def taint_failure(alternative: Alternative, device: Device) -> str | None:
        """Return the first device taint the request does not tolerate, or ``None``."""
        for taint in device.taints:
            if taint.get("effect") in _BLOCKING_TAINT_EFFECTS and not any(
                tolerates(t, taint) for t in alternative.tolerations
            ):
                value = taint.get("value") or ""
                return f"tainted {taint.get('key')}={value}:{taint.get('effect')}, not tolerated"
        return None

    def consumption(self, alternative: Alternative, device: Device) -> dict[str, Fraction] | None:
        """Return what one share takes from the device, or ``None`` if it takes it whole.

        Raise :class:`CapacityRejected` when the request does not fit the device's policy.
        The result is shared between calls: read it, never change it.
        """
        found = self._consumption_of(alternative, device.model)
        if isinstance(found, _Rejected):
            raise CapacityRejected(str(found))
        return found

    def delta(self, alternative: Alternative, model: Model) -> Fraction | None:
        """How much one pick lowers its card's free fraction; ``None`` if it cannot take one.

        A whole-card pick needs an idle card, so it takes the card's whole fraction.
        """
        local = (id(alternative), model)
        if local in self._local_deltas:
            return self._local_deltas[local]
        key = (_request_key(alternative), model)
        if key not in self._deltas:
            found = self._consumption_of(alternative, model)
            capacities = dict(model.capacities)
            if isinstance(found, _Rejected):
                self._deltas[key] = None
            elif found is None:
                self._deltas[key] = free_fraction(capacities, _values(capacities))
            else:
                self._deltas[key] = free_fraction(capacities, found)
        delta = self._local_deltas[local] = self._deltas[key]
        return delta

    def needs(self, alternative: Alternative, model: Model) -> dict[str, Fraction] | None:
        """Return what a pick must find free on a card of ``model`` (``None``: it cannot)."""
        found = self._consumption_of(alternative, model)
        if isinstance(found, _Rejected):
            return None
        return self.whole(model) if found is None else found

    def whole(self, model: Model) -> dict[str, Fraction]:
        """Return every capacity of ``model`` in full (what a whole-card pick takes); shared."""
        found = self._whole.get(model)
        if found is None:
            found = self._whole[model] = _values(dict(model.capacities))
        return found

    def takes_whole(self, alternative: Alternative, model: Model) -> bool:
        """Whether a pick on a card of ``model`` needs the card idle (and it can take one)."""
        found = self._consumption_of(alternative, model)
        return (
            not alternative.admin
            and not isinstance(found, _Rejected)
            and (found is None or alternative.exclusive)
        )

    def may_fit(self, alternative: Alternative, model: Model, idle: int, room: Any) -> bool:  # noqa: ANN401
        """Whether a node's summary leaves room for the alternative on a card of ``model``.

        ``idle`` counts the node's unused cards, ``room`` maps each capacity to the most free
        on one card. Necessary, not sufficient: a ``False`` skips the node's search.
        """
        found = self._consumption_of(alternative, model)
        if isinstance(found, _Rejected):
            return False
        if alternative.admin:
            return True  # takes nothing: a full card is seen as well as an idle one
        if found is None or alternative.exclusive:
            return idle >= (1 if alternative.all_devices else alternative.count)
        return all(room.get(name, 0) >= amount for name, amount in found.items())

    def _consumption_of(self, alternative: Alternative, model: Model) -> Consumption:
        local = (id(alternative), model)
        found = self._local.get(local, _MISSING)
        if found is _MISSING:
            found = self._local[local] = self._remembered(alternative, model)
        return found  # type: ignore[return-value]  # _MISSING was replaced

    def _remembered(self, alternative: Alternative, model: Model) -> Consumption:
        key = (_request_key(alternative), model)
        if key not in self._consumption and alternative.admin:
            # Admin access sees the card and takes none of it, whatever it asks for.
            self._consumption[key] = dict.fromkeys(model.capacities, Fraction(0))
        if key not in self._consumption:
            shareable, capacities = model.shares(alternative.sized), dict(model.capacities)
            try:
                consumed = consumed_capacity(capacities, alternative.capacity)
                if not shareable:
                    check_within(capacities, consumed)
            except CapacityRejected as exc:
                rejected = self._consumption[key] = _Rejected(str(exc))
                return rejected
            if not shareable:
                self._consumption[key] = None
            elif alternative.exclusive:
                self._consumption[key] = _values(capacities)
            else:
                self._consumption[key] = consumed
        return self._consumption[key]


_MISSING: Final = object()


def _request_key(alternative: Alternative) -> tuple[object, ...]:
    """Return what consumption depends on besides the device: amounts, exclusivity, sizing."""
    return (
        tuple(sorted(alternative.capacity.items())),
        alternative.exclusive,
        alternative.sized,
        alternative.admin,
    )


def _values(capacities: dict[str, Capacity]) -> dict[str, Fraction]:
    return {name: capacity.value for name, capacity in capacities.items()}
