"""A prepared claim's ``status.devices``: what each of its devices gave the containers.

For every device of this driver in the claim's allocation, one entry keyed as Kubernetes keys
them (driver, pool, device, shareID) with a ``Ready`` condition and ``data``: the card's UUID
and PCI bus ID, the share's cores and memory, its isolation, priority and backend. So
``kubectl describe resourceclaim`` answers "what did this pod get" without a shell on the node.

:func:`device_entries` is pure. :class:`StatusReporter` writes them in the background after a
prepare (a status write never delays or fails the kubelet's call) by merge patch carrying the
claim's ``resourceVersion``: entries of other drivers are kept, a concurrent write is a
conflict and is retried on the fresh claim.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

from dra_driver.k8s import objects
from dra_driver.k8s.errors import ForbiddenError, InvalidError
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import ReconcileLoop
from dra_driver.logging import get_logger

log = get_logger(__name__)

_READY_REASON: Final = "Prepared"


@dataclasses.dataclass(frozen=True)
class DeviceStatus:
    """What one allocated device (one share of a card) gave the claim's containers."""

    pool: str
    device: str
    share_id: str | None
    data: dict[str, Any]


def device_entries(
    driver: str, statuses: Sequence[DeviceStatus], now: str, node: str
) -> list[Object]:
    """Return ``status.devices`` entries for ``statuses``, each Ready as of ``now``."""
    entries = []
    for status in statuses:
        entry: Object = {"driver": driver, "pool": status.pool, "device": status.device}
        if status.share_id is not None:
            entry["shareID"] = status.share_id
        entry["conditions"] = [
            {
                "type": "Ready",
                "status": "True",
                "reason": _READY_REASON,
                "message": f"prepared on node {node}",
                "lastTransitionTime": now,
            }
        ]
        entry["data"] = status.data
        entries.append(entry)
    return entries


def merged(current: Sequence[Object], driver: str, ours: Sequence[Object]) -> list[Object]:
    """Return ``current`` with this driver's entries replaced by ``ours``; others kept."""
    return [e for e in current if e.get("driver") != driver] + list(ours)


@dataclasses.dataclass(frozen=True)
class _Pending:
    uid: str
    statuses: tuple[DeviceStatus, ...]


class StatusReporter:
    """Writes prepared claims' ``status.devices`` from a background loop.

    ``get_claim(namespace, name)`` reads a claim; ``patch_status(namespace, name, body)``
    merge-patches its status. A claim that is gone, replaced (another UID) or no longer
    allocated needs no status. A refusal (403: the plugin may not write device status, as on
    a cluster whose RBAC predates it; 422: the API server does not take it) is logged once
    per claim and not retried: the claim works without it.
    """

    def __init__(
        self,
        driver: str,
        node: str,
        *,
        get_claim: Callable[[str, str], Object],
        patch_status: Callable[[str, str, Object], Object],
        now: Callable[[], str],
    ) -> None:
        self._driver, self._node = driver, node
        self._get_claim, self._patch_status, self._now = get_claim, patch_status, now
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._lock = threading.Lock()
        self.loop: ReconcileLoop[tuple[str, str]] = ReconcileLoop("device-status", self._reconcile)

    def start(self) -> None:
        """Start writing."""
        self.loop.start()

    def stop(self) -> None:
        """Stop; statuses not written yet are dropped (a re-prepare does not bring them back)."""
        self.loop.stop()

    def report(self, namespace: str, name: str, uid: str, statuses: Sequence[DeviceStatus]) -> None:
        """Queue the statuses of claim ``namespace/name`` (``uid``) for writing."""
        with self._lock:
            self._pending[(namespace, name)] = _Pending(uid, tuple(statuses))
        self.loop.queue.add((namespace, name))

    def _reconcile(self, key: tuple[str, str]) -> None:
        with self._lock:
            pending = self._pending.get(key)
        if pending is None:
            return
        namespace, name = key
        claim = self._get_claim(namespace, name)  # NotFoundError: the loop drops the key
        if objects.uid(claim) != pending.uid or not objects.status(claim).get("allocation"):
            self._forget(key, pending)
            return
        current = objects.status(claim).get("devices") or []
        ours = device_entries(self._driver, pending.statuses, self._now(), self._node)
        body = {
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "status": {"devices": merged(current, self._driver, ours)},
        }
        try:
            self._patch_status(namespace, name, body)  # ConflictError: retried at once
        except (ForbiddenError, InvalidError) as exc:
            log.warning(
                "device_status.refused", claim=f"{namespace}/{name}", error=str(exc),
                hint="the claim works without it; see the chart's kubeletPlugin.deviceStatus",
            )  # fmt: skip
        else:
            log.debug("device_status.written", claim=f"{namespace}/{name}", devices=len(ours))
        self._forget(key, pending)

    def _forget(self, key: tuple[str, str], pending: _Pending) -> None:
        with self._lock:
            if self._pending.get(key) is pending:
                del self._pending[key]
