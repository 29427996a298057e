"""Which allocations still need their check before a pod's gate comes off, and the commit.

An allocation is written first and checked afterwards: once the claim watch shows the write,
and so every claim write the API server stored before it, none of its cards may be
over-committed (:mod:`dra_driver.controller.allocator`). How a replica knows what it checked
depends on whether it can have a rival.

- **Without leader election** replicas may run side by side, and each must be able to tell
  what another checked. The allocation is written alone (tentative); our finalizer, added
  after the check and guarded by the resourceVersion the check saw, commits it. A committed
  claim is never cleared; a tentative one is cleared by whoever sees it collide. Three round
  trips on a pod's path: the allocation, the finalizer, the gate.
- **With leader election** the leader writes only while it holds its Lease firmly
  (:meth:`~dra_driver.k8s.leader.LeaderElector.holds_firmly`): no rival replica can write
  before its requests have landed. Its only possible rival is kube-scheduler allocating a pod
  the webhook did not gate. So the finalizer, which then only protects the claim from
  deletion, travels with the allocation, and the leader remembers which allocations it
  wrote and which it checked. Two round trips: the allocation with its finalizer, the gate.
  A new leader (a new process) remembers nothing, so before it ungates a pod it checks again
  each of the pod's allocations that no pod uses yet (none reserved, none ungated): what the
  previous leader left between its write and its check is never ungated unchecked, and an
  allocation a pod already runs on is never cleared.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

from dra_driver.api import DriverNames
from dra_driver.controller.writes import ClaimWriter, allocation_key
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.structured.configshares import SCHEDULER_FINALIZER

_KEPT: Final = 65_536
"""Allocations remembered as written or checked; the oldest go first (long ungated)."""


class Commits:
    """Writes new allocations and tells which ones a pod's gate still waits on.

    ``elected``: leader election is on; ``alone``: whether the Lease is held firmly now.
    """

    def __init__(
        self,
        names: DriverNames,
        writer: ClaimWriter,
        *,
        elected: bool,
        alone: Callable[[], bool],
        in_use: Callable[[Object], bool],
    ) -> None:
        self._names = names
        self._writer = writer
        self._elected = elected
        self._alone = alone
        self._in_use = in_use
        self._written: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._checked: OrderedDict[tuple[str, str], None] = OrderedDict()

    def may_write(self) -> bool:
        """Whether this replica may write now: a leader only while its Lease is firm."""
        return not self._elected or self._alone()

    def write(self, claim: Object, allocation: Object, reserved_for: list[Object]) -> Object:
        """Write a new allocation; a leader adds our finalizer in the same round trip."""
        if not self._elected:
            return self._writer.write_allocation(claim, allocation, reserved_for)
        written = self._writer.allocate_protected(claim, allocation, reserved_for)
        _remember(self._written, _key(written))
        return written

    def unchecked(self, claims: Iterable[Object]) -> list[Object]:
        """Return the claims whose allocation must be checked before the gate comes off."""
        return [claim for claim in claims if self._unchecked(claim)]

    def _unchecked(self, claim: Object) -> bool:
        status = objects.status(claim)
        allocation = status.get("allocation")
        finalizers = claim["metadata"].get("finalizers") or []
        if not allocation or SCHEDULER_FINALIZER in finalizers:
            return False  # nothing to check, or kube-scheduler's own allocation
        if not self._elected:
            return self._names.finalizer not in finalizers
        key = _key(claim)
        if key in self._checked:
            return False
        # Ours, from this term: no pod can use it before we ungate one. A previous term's is
        # checked unless a pod already uses it (then whoever ungated that pod checked it).
        return key in self._written or not self._in_use(claim)

    def checked(self, claims: Iterable[Object]) -> list[Object]:
        """Note ``claims`` as checked and commit them; return them as stored.

        Without leader election the commit is our finalizer, written at the resourceVersion
        the check saw; a leader's claims carry it already.
        """
        stored = []
        for claim in claims:
            # Remembered only once the finalizer is on: a leader's finalizer patch may have
            # failed beside its allocation, and a claim remembered as checked is never
            # looked at again before its pod's gate comes off.
            stored.append(self._writer.add_finalizer(claim))
            _remember(self._checked, _key(claim))
            self._written.pop(_key(claim), None)
        return stored


def _remember(kept: OrderedDict[tuple[str, str], None], key: tuple[str, str]) -> None:
    """Add ``key`` as the newest of ``kept``, dropping the oldest beyond the bound."""
    kept[key] = None
    kept.move_to_end(key)
    while len(kept) > _KEPT:
        kept.popitem(last=False)


def _key(claim: Object) -> tuple[str, str]:
    """Identify one allocation of one claim: a claim released and allocated again is new."""
    allocation = objects.status(claim).get("allocation")
    return objects.uid(claim), allocation_key(allocation)
