"""What the allocation engine decides on: a consistent, read-only picture of the cluster.

Built from raw API objects (as informers hold them) by pure code. Our devices come from
:mod:`devices`; every allocated claim, whoever allocated it, feeds the accounting, because
kube-scheduler allocates the same cards to pods that skip the controller
(docs/resource-model.md, "How a claim gets its card").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction
from typing import Any

from dra_driver.api import ConfigError, DriverNames, Priority
from dra_driver.api.fields import MEMORY
from dra_driver.engine.devices import MALFORMED, Device, read_devices
from dra_driver.engine.load import Load
from dra_driver.engine.nomination import Nomination, NominationError, nomination_of
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.quota import Amounts, ClaimUse, Quota, claim_use, total_use
from dra_driver.structured.allocated import AllocatedState, DeviceId
from dra_driver.structured.config import share_config
from dra_driver.structured.configshares import counted_claim
from dra_driver.structured.consumable import Capacity
from dra_driver.structured.taintrules import rule_taints, with_rule_taints


@dataclasses.dataclass(frozen=True)
class Held:
    """Room held for an unallocated claim by its nomination (:mod:`nomination`)."""

    claim: Object
    """The claim as read, annotation and all: counting it again restores the hold."""
    counted: Object
    """The claim as counted: allocated to the nomination's planned results."""
    nomination: Nomination


@dataclasses.dataclass
class Snapshot:
    """The cluster as one allocation decision sees it; build with :meth:`build`."""

    names: DriverNames
    nodes: dict[str, Object]
    devices: dict[str, tuple[Device, ...]]
    """This driver's devices per node name, in :attr:`Device.sort_key` order."""
    by_id: dict[DeviceId, Device]
    classes: dict[str, Object]
    state: AllocatedState
    priorities: dict[DeviceId, dict[Priority, int]]
    """How many shares of each priority each of our devices has (placement uses it)."""
    unusable_pools: dict[str, dict[str, str]]
    """Node -> pool -> why none of the pool's devices may be used there (kube-scheduler's
    incomplete and invalid pools)."""
    problems: list[str]
    counted: dict[str, Object]
    """Claim UID -> the version of the claim whose allocation is counted."""
    load: Load
    """Free capacity per device and node, kept in step with :attr:`state`."""
    counted_names: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    """``(namespace, name)`` -> the UID counted under that name."""
    memo: dict[object, Any] = dataclasses.field(default_factory=dict)
    """Static results that hold as long as the devices do (see :class:`Matcher`)."""
    share_plain: bool = True
    """Share whole-only cards by config sizes; see :attr:`Device.plain`."""
    _quota_uses: dict[str, dict[str, ClaimUse]] = dataclasses.field(default_factory=dict)
    """Namespace -> claim UID -> what the claim takes of the namespace's GpuShareQuotas, for
    the namespaces asked about (:meth:`quota_uses`): most have no quota, and at 20,000 claims
    an entry for every claim was 9 MB of the controller's memory."""
    held: dict[str, Held] = dataclasses.field(default_factory=dict)
    """Claim UID -> the room its nomination holds, counted as taken by every decision."""
    preemptible: dict[str, Object] = dataclasses.field(default_factory=dict)
    """Claim UID -> counted claims whose every share of ours is offline and preemptible."""
    marks: dict[str, tuple[tuple[DeviceId, Priority], ...]] = dataclasses.field(
        default_factory=dict
    )
    """Claim UID -> what it adds to :attr:`priorities`, so removing it decodes nothing."""
    _one_mark: dict[tuple[DeviceId, Priority], tuple[tuple[DeviceId, Priority]]] = (
        dataclasses.field(default_factory=dict)
    )
    """The marks of a claim with one share, shared by every claim with the same: a claim's own
    tuples were 4 MB at 20,000 claims. At most a device's priorities, so it stays bounded."""

    @functools.cached_property
    def node_names(self) -> tuple[str, ...]:
        """Every node's name, sorted (the nodes of a snapshot never change)."""
        return tuple(sorted(self.nodes))

    @classmethod
    def build(
        cls,
        names: DriverNames,
        *,
        nodes: Iterable[Object],
        slices: Iterable[Object],
        classes: Iterable[Object],
        claims: Iterable[Object],
        taint_rules: Iterable[Object] = (),
        share_plain: bool = True,
    ) -> Snapshot:
        """Assemble a snapshot from raw objects; malformed pieces become ``problems``.

        ``taint_rules`` (DeviceTaintRules) taint the devices they select, as if their slices
        said so. ``share_plain`` lets config-sized shares go on cards published whole-only.
        """
        problems: list[str] = []
        tainted = with_rule_taints(list(slices), rule_taints(taint_rules, names.driver))
        devices, unusable = read_devices(names.driver, tainted, problems, share_plain)
        by_node: dict[str, list[Device]] = {}
        for device in devices:
            by_node.setdefault(device.node, []).append(device)
        state = AllocatedState()
        snapshot = cls(
            names=names,
            nodes={str(node["metadata"]["name"]): node for node in nodes},
            devices={
                node: tuple(sorted(found, key=lambda d: d.sort_key))
                for node, found in by_node.items()
            },
            by_id={device.id: device for device in devices},
            classes={str(c["metadata"]["name"]): c for c in classes},
            state=state,
            priorities={},
            counted={},
            unusable_pools=unusable,
            problems=problems,
            load=Load(state, {}),
            share_plain=share_plain,
        )
        for claim in claims:
            snapshot.update_claim(claim)
        problems.extend(snapshot.state.problems)
        # Indexed once the claims are in: cheaper than re-sorting a node per claim.
        snapshot.load = Load(
            state,
            {
                node: [(d.id, d.capacities, d.model) for d in found]
                for node, found in snapshot.devices.items()
            },
        )
        return snapshot

    def update_claim(self, claim: Object) -> None:
        """Count ``claim`` as it is now, replacing whatever was counted for its UID.

        Idempotent: the controller calls it after each of its writes, and a claim counted by
        :meth:`build` is never counted twice.
        """
        try:
            uid = str(objects.metadata(claim).get("uid") or "")
            allocated = bool(objects.status(claim).get("allocation"))
        except MALFORMED as exc:
            self.problems.append(f"a claim: {exc!s}; not counted")
            return
        self.remove_claim(uid)
        if not allocated:
            self._hold(uid, claim)
        else:
            if self.share_plain:
                # What is counted is what gets removed again: counted once, stored as counted.
                claim = counted_claim(claim, self.names, self.capacities)
            self.state.add_claim(claim)
            marks, preemptible = self._priority_marks(claim)
            self._mark(marks, 1)
            self.marks[uid] = marks
            if preemptible:
                self.preemptible[uid] = claim
            self.counted[uid] = claim
            self.counted_names[_name_of(claim)] = uid
            self.load.refresh(_device_ids(claim))
            uses = self._quota_uses.get(objects.namespace(claim))
            if uses is not None and (use := claim_use(claim, self.names, self.card_memory)):
                uses[uid] = use

    def _hold(self, uid: str, claim: Object) -> None:
        """Count the room a nomination holds for the unallocated ``claim``, if it has one."""
        try:
            nomination = nomination_of(claim, self.names.nomination_annotation)
        except NominationError as exc:
            self.problems.append(f"claim {'/'.join(_name_of(claim))}: nomination: {exc}; ignored")
            return
        if nomination is None:
            return
        held = nomination.held_claim(claim)
        devices = _device_ids(held)
        unknown = [d for d in devices if d not in self.by_id]
        if unknown:
            self.problems.append(
                f"claim {'/'.join(_name_of(claim))}: nomination names devices not published "
                f"now ({', '.join('/'.join(d) for d in unknown)}); ignored"
            )
            return
        self.state.add_claim(held)
        self.held[uid] = Held(claim, held, nomination)
        self.load.refresh(devices)

    @contextlib.contextmanager
    def without(self, uids: Iterable[str]) -> Iterator[None]:
        """Leave the claims (allocations and holds) with ``uids`` uncounted inside the block.

        For a question about the cluster as it would be without them (a pod placed on the
        room its own nomination holds, a pod placed after victims are gone). Only what
        placement reads changes (the allocated state, the free capacity, the priorities), so
        a question is cheap; all is counted again, exactly as before, when the block ends.
        """
        gone: list[tuple[Object, tuple[tuple[DeviceId, Priority], ...]]] = []
        for uid in dict.fromkeys(uids):
            if uid in self.held:
                gone.append((self.held[uid].counted, ()))
            elif uid in self.counted:
                gone.append((self.counted[uid], self.marks.get(uid, ())))
        devices = {device for claim, _ in gone for device in _device_ids(claim)}
        problems = len(self.state.problems)
        for claim, marks in gone:
            self.state.remove_claim(claim)
            self._mark(marks, -1)
        self.load.refresh(devices)
        try:
            yield
        finally:
            for claim, marks in gone:
                self.state.add_claim(claim)
                self._mark(marks, 1)
            del self.state.problems[problems:]  # each was reported when first counted
            self.load.refresh(devices)

    def remove_claim(self, uid: str) -> None:
        """Stop counting the claim with ``uid`` (its allocation ended or it is gone)."""
        held = self.held.pop(uid, None)
        if held is not None:
            self.state.remove_claim(held.counted)
            self.load.refresh(_device_ids(held.counted))
        self.preemptible.pop(uid, None)
        counted = self.counted.pop(uid, None)
        if counted is not None:
            if self.counted_names.get(_name_of(counted)) == uid:
                del self.counted_names[_name_of(counted)]
            self.state.remove_claim(counted)
            self._mark(self.marks.pop(uid, ()), -1)
            self.load.refresh(_device_ids(counted))
            uses = self._quota_uses.get(objects.namespace(counted))
            if uses is not None:
                uses.pop(uid, None)

    def quota_uses(self, namespace: str) -> dict[str, ClaimUse]:
        """Return claim UID -> what each counted claim of ``namespace`` takes of its quotas.

        Worked out the first time a namespace is asked about, then kept in step with every
        claim counted or removed.
        """
        uses = self._quota_uses.get(namespace)
        if uses is None:
            uses = self._quota_uses[namespace] = {
                uid: use
                for uid, claim in self.counted.items()
                if objects.namespace(claim) == namespace
                and (use := claim_use(claim, self.names, self.card_memory)) is not None
            }
        return uses

    def quota_used(self, quota: Quota) -> Amounts:
        """Return what the counted claims of ``quota``'s namespace take of it."""
        used, _ = total_use(quota, self.quota_uses(quota.namespace).values())
        return used

    def quota_use(self, claim: Object) -> ClaimUse | None:
        """Return what ``claim``'s allocation would take of its namespace's quotas if written.

        Counted as :meth:`update_claim` counts it, so an asked amount and a used one compare.
        """
        if self.share_plain:
            claim = counted_claim(claim, self.names, self.capacities)
        return claim_use(claim, self.names, self.card_memory)

    def card_memory(self, pool: str, device: str) -> Fraction | None:
        """Return the memory (bytes) of one of our cards, ``None`` for a device not ours."""
        found = self.by_id.get((self.names.driver, pool, device))
        memory = found.capacities.get(MEMORY) if found is not None else None
        return memory.value if memory is not None else None

    def capacities(self, device_id: DeviceId) -> Mapping[str, Capacity] | None:
        """Return the capacities of one of our devices, ``None`` for a device not known."""
        device = self.by_id.get(device_id)
        return device.capacities if device is not None else None

    def overcommitted(self, claims: Iterable[Object]) -> list[str]:
        """Say which of our cards the claims' allocations share with more than they hold.

        Held room is left out: it overlaps its victims' allocations until they are released,
        and a decision that saw the hold never placed anything on it.
        """
        device_ids = list(dict.fromkeys(d for claim in claims for d in _device_ids(claim)))
        wanted = set(device_ids)
        holds = [h.counted for h in self.held.values() if wanted & set(_device_ids(h.counted))]
        for held in holds:
            self.state.remove_claim(held)
        try:
            problems = []
            for device_id in device_ids:
                device = self.by_id.get(device_id)
                problem = device and self.state.overcommitted(device_id, device.capacities)
                if device and problem:
                    problems.append(f"card {device.label}: {problem}")
            return problems
        finally:
            for held in holds:
                self.state.add_claim(held)

    def _mark(self, marks: Iterable[tuple[DeviceId, Priority]], sign: int) -> None:
        for device_id, priority in marks:
            counts = self.priorities.setdefault(device_id, {})
            counts[priority] = counts.get(priority, 0) + sign

    def _priority_marks(self, claim: Object) -> tuple[tuple[tuple[DeviceId, Priority], ...], bool]:
        """Return each share of ours with its priority, and whether all are preemptible offline."""
        try:
            allocation = claim["status"]["allocation"]
            devices = allocation.get("devices") or {}
            results = list(devices.get("results") or [])
            configs = list(devices.get("config") or [])
        except MALFORMED:
            return (), False  # AllocatedState reports malformed allocations already
        marks: list[tuple[DeviceId, Priority]] = []
        preemptible = 0
        for result in results:
            if not isinstance(result, dict):
                continue
            device_id = (result.get("driver"), result.get("pool"), result.get("device"))
            if device_id not in self.by_id or result.get("adminAccess"):
                continue
            try:
                config = share_config(
                    configs,
                    self.names,
                    str(result.get("request", "")),
                    path="status.allocation.devices.config",
                )
            except (ConfigError, *MALFORMED):
                # The kubelet plugin refuses such a claim; it still holds its capacity.
                config = share_config([], self.names, "", path="")
            effective = config.effective()
            marks.append((self.by_id[device_id].id, effective.priority))
            preemptible += effective.preemptible_offline
        if len(marks) == 1:
            return self._one_mark.setdefault(marks[0], (marks[0],)), preemptible == 1
        return tuple(marks), bool(marks) and preemptible == len(marks)


def _name_of(claim: Object) -> tuple[str, str]:
    metadata = objects.metadata(claim)
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _device_ids(claim: Object) -> list[DeviceId]:
    """Return the devices a claim's allocation names (malformed results are skipped)."""
    try:
        results = claim["status"]["allocation"]["devices"]["results"]
        return [
            (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for r in results
            if isinstance(r, dict)
        ]
    except (*MALFORMED, IndexError):
        return []
