"""From the node's current ResourceSlices to the desired ones: the writes, by the pool rules.

Consumers use only a pool's slices at its highest generation, and ``resourceSliceCount``
says how many there are at that generation, so a change to one slice may be made in place
while any other change needs a new generation written on every slice. Also what the API
server kept of a write (fields of a disabled feature gate are dropped silently) and what a
write must carry over from the stored slice. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dra_driver.k8s.objects import Object


def slice_name(obj: Object) -> str:
    """Return the object's name."""
    return str(obj["metadata"]["name"])


def _pool(obj: Object) -> Object:
    pool: Object = obj.get("spec", {}).get("pool") or {}
    return pool


def _generation(obj: Object) -> int:
    return int(_pool(obj).get("generation") or 0)


def with_generation(slice_: Object, generation: int) -> Object:
    """Return ``slice_`` with ``spec.pool.generation`` set."""
    spec = slice_["spec"]
    return {**slice_, "spec": {**spec, "pool": {**spec["pool"], "generation": generation}}}


def _covers(want: object, have: object) -> bool:
    """Whether ``have`` holds everything in ``want``; fields the server added are ignored.

    An empty list or map in ``want`` matches a missing field, as the server omits empty ones.
    """
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        return all(
            _covers(value, have[key]) if key in have else value in ([], {})
            for key, value in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(_covers(w, h) for w, h in zip(want, have, strict=True))
        )
    return want == have


def _taints(obj: Object) -> dict[str, set[tuple[object, object, object]]]:
    return {
        name: {_taint_key(t) for t in device.get("taints") or []}
        for name, device in _devices(obj).items()
    }


def _up_to_date(current: Object, want: Object) -> bool:
    """Whether ``current`` holds all of ``want``, and no taint ``want`` has not (a healed card)."""
    meta, wanted = current.get("metadata", {}), want["metadata"]
    return (
        _covers(want["spec"], current.get("spec"))
        and _taints(current) == _taints(want)
        and _covers(wanted["labels"], meta.get("labels") or {})
        and meta.get("ownerReferences") == wanted["ownerReferences"]
    )


def keeps_capacity(sent: Object, stored: Object) -> bool:
    """Whether the server kept ``allowMultipleAllocations`` and every ``requestPolicy`` sent.

    Plain devices (sent without them) say nothing either way.
    """
    stored_devices = _devices(stored)
    for device in sent["spec"].get("devices") or []:
        if not device.get("allowMultipleAllocations"):
            continue
        got = stored_devices.get(device["name"])
        if got is None or got.get("allowMultipleAllocations") is not True:
            return False
        for name, capacity in device.get("capacity", {}).items():
            if "requestPolicy" in capacity and "requestPolicy" not in got.get("capacity", {}).get(
                name, {}
            ):
                return False
    return True


def _devices(obj: Object) -> dict[str, Object]:
    return {str(d.get("name")): d for d in obj.get("spec", {}).get("devices") or []}


def _taint_key(taint: Object) -> tuple[object, object, object]:
    return taint.get("key"), taint.get("value"), taint.get("effect")


def keeps_taints(sent: Object, stored: Object) -> bool:
    """Whether the server kept every device taint sent (off where ``DRADeviceTaints`` is)."""
    kept = _taints(stored)
    return all(taints <= kept.get(name, set()) for name, taints in _taints(sent).items())


def carry_taint_times(current: Object, want: Object) -> Object:
    """Return ``want`` with the ``timeAdded`` the server gave each taint ``current`` holds.

    An update without it would make the server stamp the taint anew, and a ``NoExecute``
    taint's ``tolerationSeconds`` would count from every unrelated change of the slice.
    """
    stored = {
        (name, _taint_key(taint)): taint["timeAdded"]
        for name, device in _devices(current).items()
        for taint in device.get("taints") or []
        if taint.get("timeAdded")
    }
    devices = []
    for device in want["spec"].get("devices") or []:
        taints = [
            {**taint, "timeAdded": stored[key]}
            if (key := (device["name"], _taint_key(taint))) in stored
            else taint
            for taint in device.get("taints") or []
        ]
        devices.append({**device, "taints": taints} if taints else device)
    return {**want, "spec": {**want["spec"], "devices": devices}}


def _device_names(obj: Object) -> set[str]:
    return set(_devices(obj))


def _match(current: list[Object], desired: list[Object]) -> list[tuple[Object | None, Object]]:
    """Pair each desired slice with the current slice holding the same or most devices."""
    free = list(current)
    pairs: list[tuple[Object | None, Object] | None] = [None] * len(desired)
    for i, want in enumerate(desired):
        same = next((c for c in free if _device_names(c) == _device_names(want)), None)
        if same is not None:
            free.remove(same)
            pairs[i] = (same, want)
    for i, want in enumerate(desired):
        if pairs[i] is None:
            best = max(
                free, key=lambda c: len(_device_names(c) & _device_names(want)), default=None
            )
            if best is not None:
                free.remove(best)
            pairs[i] = (best, want)
    return [pair for pair in pairs if pair is not None]


@dataclass
class SyncPlan:
    """The writes that turn the current slices into the desired ones."""

    generation: int
    delete_first: list[Object] = field(default_factory=list)
    update: list[tuple[Object, Object]] = field(default_factory=list)
    create: list[Object] = field(default_factory=list)
    delete_last: list[Object] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether nothing needs writing."""
        return not (self.delete_first or self.update or self.create or self.delete_last)


def plan_sync(
    actual: Sequence[Object], desired: Sequence[Object], pool_name: str, last_generation: int
) -> SyncPlan:
    """Decide the writes by the pool rules above; ``last_generation`` is the highest we wrote.

    Slices of older generations or other pools are deleted first. If the slice count is
    unchanged and at most one slice differs, that one is updated in place; otherwise the
    generation becomes max(existing, ours) + 1 and every slice is written at it, reusing the
    current objects where possible, and the current slices not reused are deleted last.
    """
    ours = [s for s in actual if _pool(s).get("name") == pool_name]
    top = max((_generation(s) for s in ours), default=0)
    current = sorted((s for s in ours if _generation(s) == top), key=slice_name)
    current_names = {slice_name(s) for s in current}
    obsolete = [s for s in actual if slice_name(s) not in current_names]
    pairs = _match(current, list(desired))
    changed = [(c, w) for c, w in pairs if c is None or not _up_to_date(c, with_generation(w, top))]
    if current and len(current) == len(desired) and len(changed) <= 1 and top >= last_generation:
        updates = [(c, with_generation(w, top)) for c, w in changed if c is not None]
        return SyncPlan(top, delete_first=obsolete, update=updates)
    generation = max(top, last_generation) + 1
    reused = {slice_name(c) for c, _ in pairs if c is not None}
    return SyncPlan(
        generation,
        delete_first=obsolete,
        update=[(c, with_generation(w, generation)) for c, w in pairs if c is not None],
        create=[with_generation(w, generation) for c, w in pairs if c is None],
        delete_last=[c for c in current if slice_name(c) not in reused],
    )
