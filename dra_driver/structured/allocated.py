"""The allocated state: which devices are taken whole and how much of each shared one is consumed.

Built, as the scheduler's ``GatherAllocatedState`` does, from every allocated claim whoever
allocated it: a result without a shareID makes its device exclusively used, one with a shareID
adds a share whose ``consumedCapacity`` is summed per device, and adminAccess results count for
nothing. Whether a result is a share is decided by its shareID alone, as in the
scheduler: a device the scheduler treats as non-shareable is allocated without one.

It can be kept up to date incrementally; each share is remembered, so removal is exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Final, cast

from dra_driver.k8s.quantity import (
    QuantityError,
    format_quantity,
    parse_quantity,
    quantity_format,
)
from dra_driver.structured.consumable import Capacity

DeviceId = tuple[str, str, str]
"""(driver, pool, device)."""

_Amounts = frozenset[tuple[str, Fraction]]
# One share as remembered, so that it can be removed exactly: (shareID, consumed amounts).
_Share = tuple[str, _Amounts]
# A counted result: its device and its share, None when it holds the device exclusively.
_Entry = tuple[DeviceId, _Share | None]

_SHARED_AMOUNTS: dict[_Amounts, _Amounts] = {}
_SHARED_AMOUNTS_LIMIT: Final = 4096
"""Distinct consumed amounts kept as one object for every share that consumes them. Claims
come in few sizes, and a share's own set of amounts was most of what the allocated state
holds per claim (6 MB at 20,000 claims); past the limit a share keeps its own."""


def _shared(amounts: _Amounts) -> _Amounts:
    found = _SHARED_AMOUNTS.get(amounts)
    if found is not None:
        return found
    if len(_SHARED_AMOUNTS) < _SHARED_AMOUNTS_LIMIT:
        _SHARED_AMOUNTS[amounts] = amounts
    return amounts


class _MalformedError(ValueError):
    """A result that cannot be counted; the message says what is wrong with it."""


def _parse(result: object) -> _Entry | None:
    """Return what a result counts as, or None for an adminAccess one (which counts for nothing)."""
    if not isinstance(result, Mapping):
        raise _MalformedError(f"allocation result is not an object: {result!r}")
    if result.get("adminAccess"):
        return None
    ids = tuple(result.get(key) for key in ("driver", "pool", "device"))
    if not all(isinstance(part, str) and part for part in ids):
        raise _MalformedError(f"allocation result lacks driver, pool or device: {dict(result)!r}")
    device = cast(DeviceId, ids)
    share_id = result.get("shareID")
    if share_id is not None and not isinstance(share_id, str):
        raise _MalformedError(f"allocation result for {device} has shareID {share_id!r}")
    raw = result.get("consumedCapacity") or {}
    if not isinstance(raw, Mapping):
        raise _MalformedError(f"allocation result for {device} has consumedCapacity {raw!r}")
    consumed: dict[str, Fraction] = {}
    for capacity, quantity in raw.items():
        try:
            consumed[str(capacity)] = parse_quantity(str(quantity))
        except QuantityError as exc:
            raise _MalformedError(f"allocation result for {device}: {capacity}: {exc}") from exc
    return device, None if share_id is None else (share_id, _shared(frozenset(consumed.items())))


def _claim_results(claim: object) -> tuple[str, list[object]]:
    """Return a claim's name and its allocation results (none when it is not allocated)."""
    meta = _field(claim, "metadata")
    name = f"claim {meta.get('namespace', '')}/{meta.get('name', '')}"
    allocation = _field(_field(claim, "status"), "allocation")
    results = _field(allocation, "devices").get("results") or []
    if not isinstance(results, list):
        raise _MalformedError(f"{name}: allocation results are not a list: {results!r}")
    return name, results


def _field(parent: object, key: str) -> Mapping[str, Any]:
    """Return a nested object, empty when absent; raise _MalformedError when not an object."""
    if not isinstance(parent, Mapping):
        raise _MalformedError(f"claim has {parent!r} where an object belongs")
    value = parent.get(key) or {}
    if not isinstance(value, Mapping):
        raise _MalformedError(f"claim field {key} is {value!r}, not an object")
    return value


class AllocatedState:
    """What is in use: exclusive devices and the capacity consumed on shared ones.

    ``exclusive``: devices allocated without a shareID. ``consumed``: the summed
    consumedCapacity of each shared device's shares. ``shares``: how many shares each device
    has (a share may consume nothing, yet the device is in use). ``problems``: results that
    could not be counted, and why. Mutate it only through the methods: the first three are
    views kept in step with the individual allocations behind them.
    """

    def __init__(self) -> None:
        self.exclusive: set[DeviceId] = set()
        self.consumed: dict[DeviceId, dict[str, Fraction]] = {}
        self.shares: dict[DeviceId, int] = {}
        self.problems: list[str] = []
        # Counted, so removing one of two (inconsistent) exclusive holders keeps the device used.
        self._exclusive_counts: Counter[DeviceId] = Counter()
        self._share_entries: dict[DeviceId, Counter[_Share]] = {}

    @classmethod
    def from_claims(cls, claims: Iterable[Mapping[str, Any]]) -> AllocatedState:
        """Gather the state from every allocated claim, whoever allocated it."""
        state = cls()
        for claim in claims:
            state.add_claim(claim)
        return state

    def copy(self) -> AllocatedState:
        """Return an independent copy, to try allocations without committing them."""
        other = AllocatedState()
        other.exclusive = set(self.exclusive)
        other.consumed = {device: dict(used) for device, used in self.consumed.items()}
        other.shares = dict(self.shares)
        other.problems = list(self.problems)
        other._exclusive_counts = Counter(self._exclusive_counts)
        other._share_entries = {d: Counter(e) for d, e in self._share_entries.items()}
        return other

    def add_claim(self, claim: Mapping[str, Any]) -> None:
        """Count every result of a claim's allocation; an unallocated claim adds nothing."""
        try:
            name, results = _claim_results(claim)
        except _MalformedError as exc:
            self.problems.append(str(exc))
            return
        for result in results:
            self._add(result, f"{name}: ")

    def remove_claim(self, claim: Mapping[str, Any]) -> None:
        """Undo :meth:`add_claim` for the same claim; raise ValueError if it was not added."""
        try:
            _, results = _claim_results(claim)
        except _MalformedError:
            return
        self._remove_all(results)

    def add_result(self, result: Mapping[str, Any]) -> None:
        """Count one DeviceRequestAllocationResult; a malformed one is recorded in problems."""
        self._add(result, "")

    def remove_result(self, result: Mapping[str, Any]) -> None:
        """Undo :meth:`add_result`; raise ValueError if no such result was added.

        A malformed result was never counted, so removing it changes nothing: that keeps
        :meth:`remove_claim` the inverse of :meth:`add_claim` for any claim.
        """
        self._remove_all([result])

    def in_use(self, device: DeviceId) -> bool:
        """Tell whether the device is allocated at all, whole or as any share."""
        return device in self.exclusive or device in self.shares

    def free(self, device: DeviceId, capacities: Mapping[str, Capacity]) -> dict[str, Fraction]:
        """Return each capacity's value less what the shares consume (ignoring exclusive use).

        Not clamped: an over-committed device shows a negative amount, so callers can detect it.
        """
        used = self.consumed.get(device, {})
        return {name: cap.value - used.get(name, Fraction(0)) for name, cap in capacities.items()}

    def fits(
        self, device: DeviceId, capacities: Mapping[str, Capacity], consumed: Mapping[str, Fraction]
    ) -> bool:
        """Tell whether one more share consuming ``consumed`` fits, as CmpRequestOverCapacity does.

        Only the device's own capacities are compared (a request naming others was already
        rejected by :func:`~dra_driver.structured.consumable.consumed_capacity`); reaching the
        value exactly fits.
        """
        if device in self.exclusive:
            return False
        used = self.consumed.get(device, {})
        zero = Fraction(0)
        return all(
            used.get(name, zero) + consumed.get(name, zero) <= cap.value
            for name, cap in capacities.items()
        )

    def overcommitted(self, device: DeviceId, capacities: Mapping[str, Capacity]) -> str | None:
        """Say how the device holds more than it can, or return ``None`` when it does not.

        One allocator never does this; two that did not see each other's writes can (two
        controller replicas, or ours and kube-scheduler): the controller checks its fresh
        allocations with it before it lets a pod run on them.
        """
        shares = self._share_entries.get(device, Counter())
        holders = self._exclusive_counts[device] + sum(shares.values())
        if device in self.exclusive and holders > 1:
            return f"used whole beside {holders - 1} other allocation(s)"
        ids: Counter[str] = Counter()
        for (share_id, _), times in shares.items():
            ids[share_id] += times
        twice = sorted(share_id for share_id, times in ids.items() if times > 1)
        if twice:
            return f"share {twice[0]} allocated more than once"
        used = self.consumed.get(device, {})
        for name, capacity in sorted(capacities.items()):
            amount = used.get(name, Fraction(0))
            if amount > capacity.value:
                shown = format_quantity(amount, quantity_format(capacity.text))
                return f"{name}: {shown} allocated of {capacity.text}"
        return None

    def _add(self, result: object, context: str) -> None:
        try:
            entry = _parse(result)
        except _MalformedError as exc:
            self.problems.append(f"{context}{exc}; not counted")
            return
        if entry is None:
            return
        device, share = entry
        if share is None:
            self._exclusive_counts[device] += 1
            self.exclusive.add(device)
            return
        self._share_entries.setdefault(device, Counter())[share] += 1
        self.shares[device] = self.shares.get(device, 0) + 1
        used = self.consumed.setdefault(device, {})
        for name, amount in share[1]:
            used[name] = used.get(name, Fraction(0)) + amount

    def _remove_all(self, results: Iterable[object]) -> None:
        """Uncount the results, checking them all first so a failed removal changes nothing."""
        wanted: Counter[_Entry] = Counter()
        for result in results:
            try:
                entry = _parse(result)
            except _MalformedError:
                continue  # never counted, see remove_result
            if entry is not None:
                wanted[entry] += 1
        for (device, share), count in wanted.items():
            entries = self._share_entries.get(device, Counter())
            if (self._exclusive_counts[device] if share is None else entries[share]) < count:
                what = "exclusive use" if share is None else f"share {share[0]} {dict(share[1])}"
                raise ValueError(f"cannot remove {what} of device {device}: it was not added")
        for (device, share), count in wanted.items():
            if share is None:
                self._exclusive_counts[device] -= count
                if not self._exclusive_counts[device]:
                    del self._exclusive_counts[device]
                    self.exclusive.discard(device)
            else:
                self._remove_share(device, share, count)

    def _remove_share(self, device: DeviceId, share: _Share, count: int) -> None:
        entries = self._share_entries[device]
        entries[share] -= count
        if not entries[share]:
            del entries[share]
        if not entries:
            del self._share_entries[device], self.shares[device], self.consumed[device]
            return
        self.shares[device] -= count
        # Re-summing the survivors keeps the entry identical to a rebuild: no stray zero keys.
        used: dict[str, Fraction] = {}
        for (_, amounts), times in entries.items():
            for name, amount in amounts:
                used[name] = used.get(name, Fraction(0)) + amount * times
        self.consumed[device] = used

    __hash__ = None  # type: ignore[assignment]  # mutable

    def _key(self) -> tuple[object, ...]:
        return self._exclusive_counts, self._share_entries, self.exclusive, self.consumed

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, AllocatedState) else NotImplemented

    def __repr__(self) -> str:
        return (
            f"AllocatedState(exclusive={self.exclusive!r}, consumed={self.consumed!r}, "
            f"shares={self.shares!r}, problems={len(self.problems)})"
        )
