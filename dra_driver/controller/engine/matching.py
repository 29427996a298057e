"""What a device offers one request, checked once per snapshot, and what a pick records.

Static checks (selectors, device taints, the request policy) do not depend on what else is
allocated, so the :class:`Matcher` memoizes selector results per snapshot; the search only
re-checks free capacity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Final

from dra_driver.controller.engine.requests import Alternative
from dra_driver.controller.engine.snapshot import Device, Snapshot
from dra_driver.k8s.scheduling import tolerates
from dra_driver.structured import cel
from dra_driver.structured.allocated import DeviceId
from dra_driver.structured.consumable import consumed_capacity, format_consumed

Object = dict[str, Any]

_BLOCKING_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


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
        if self.consumed is not None:
            result["shareID"] = share_id()
            result["consumedCapacity"] = format_consumed(self.device.capacities, self.consumed)
        return result


class Matcher:
    """Static device checks (selectors, taints, request policy), memoized per snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._selector_cache: dict[tuple[str, DeviceId], str | None] = {}

    def selector_failure(self, selectors: Sequence[cel.Selector], device: Device) -> str | None:
        """Return why the device fails a selector (a runtime error counts), or ``None``."""
        for selector in selectors:
            key = (selector.expression, device.id)
            if key not in self._selector_cache:
                try:
                    ok = selector.matches(device.variable)
                    self._selector_cache[key] = None if ok else "does not match the selectors"
                except cel.CelEvaluationError as exc:
                    self._selector_cache[key] = str(exc)
            failure = self._selector_cache[key]
            if failure is not None:
                return failure
        return None

    @staticmethod
    def taint_failure(alternative: Alternative, device: Device) -> str | None:
        """Return the first device taint the request does not tolerate, or ``None``."""
        for taint in device.taints:
            if taint.get("effect") in _BLOCKING_TAINT_EFFECTS and not any(
                tolerates(t, taint) for t in alternative.tolerations
            ):
                return f"has untolerated taint {taint.get('key')}={taint.get('value', '')}"
        return None

    @staticmethod
    def consumption(alternative: Alternative, device: Device) -> dict[str, Fraction] | None:
        """Return what one share takes from the device, or ``None`` if it takes it whole.

        Raise :class:`CapacityRejected` when the request does not fit the device's policy.
        """
        consumed = consumed_capacity(device.capacities, alternative.capacity)
        if not device.shareable:
            return None
        if alternative.exclusive:
            return {name: capacity.value for name, capacity in device.capacities.items()}
        return consumed
