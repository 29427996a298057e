"""Keeps the node's ResourceSlices equal to the cards it is given, by the pool rules below.

One pool per node, named after the node. A change confined to one slice is written in place;
adding or removing slices, or changing more than one, bumps the pool generation and rewrites
every slice at the new generation, so consumers never mix old and new slices. Slices someone
deletes are written again. Before the first slice with devices is written, a dry-run create
asks what the API server keeps (:mod:`dra_driver.kubeletplugin.slicefeatures`): without
consumable capacity the cards are published as plain devices (same device names, so
allocations made meanwhile stay valid when they turn shareable again); without device taints
an unhealthy card is left out instead of tainted. A taint keeps the ``timeAdded`` the server
gave it across later updates of the slice.

A write that fails with an unknown outcome (a timeout, a broken connection, a 500) may have
been stored. Slices are created with ``generateName``, so a create repeated blindly would
leave two slices where the pool declares one, and the scheduler ignores such a pool. So the
node's slices are listed afresh, and the next pass plans from that list until the informer
has caught up with it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Unpack

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.k8s import objects, raw
from dra_driver.k8s.client import timeouts_of
from dra_driver.k8s.errors import ApiError, NotFoundError, RetryableError
from dra_driver.k8s.informer import EventType, Informer
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import ReconcileLoop, Requeue
from dra_driver.kubeletplugin.slicefeatures import FeatureOptions, ServerFeatures
from dra_driver.logging import get_logger
from dra_driver.metrics.watchdog import Watched
from dra_driver.nvml.card import Card, Health
from dra_driver.publishing.slices import desired_slices, unhealthy_taint_key
from dra_driver.publishing.slicesync import carry_taint_times, plan_sync, slice_name

log = get_logger(__name__)

_KEY: Final = "slices"
_PASS_CALLS: Final = 4
"""API calls one pass may wait out: the probe, a node read, a write and its retry's read."""
_NODE_RETRY_SECONDS: Final = 2.0
_SYNC_RETRY_SECONDS: Final = 0.05


def _version(text: object) -> int:
    """Return a resourceVersion as a number (etcd revisions are), 0 if it is not one."""
    return int(text) if isinstance(text, str) and text.isdigit() else 0


def _rv(obj: Object) -> int:
    return _version(obj.get("metadata", {}).get("resourceVersion"))


class SlicePublisher:
    """Publishes the node's cards as ResourceSlices and keeps them so until stopped.

    ``publish`` may be called any time, from any thread; the latest cards win. Writes happen on
    one worker thread, which retries API errors with backoff. ``stop`` leaves the slices in
    place: the kubelet deletes a node's slices of a driver itself, about 30 s after the last
    plugin of that driver on the node disconnected, and all of the node's slices when it starts.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        names: DriverNames,
        node_name: str,
        *,
        unhealthy_effect: str = "NoSchedule",
        **features: Unpack[FeatureOptions],
    ) -> None:
        self._names = names
        self._node_name = node_name
        self._unhealthy_effect = unhealthy_effect
        self._features = ServerFeatures(api_client, unhealthy_taint_key(names), **features)
        self._resource = client.ResourceV1Api(api_client)
        self._api_client = api_client
        self._lock = threading.Lock()
        self._cards: tuple[Card, ...] | None = None
        self._wanted = 0  # bumped by every publish(), so a pass knows whether it is current
        self._published = threading.Event()
        self._node_uid: str | None = None
        self._last_generation = 0
        # Our writes the informer has not shown yet, by name: (resourceVersion, object or None
        # if we deleted it). Without this a pass right after a write would redo it.
        self._written: dict[str, tuple[int, Object | None]] = {}
        self._live: tuple[int, list[Object]] | None = None
        """The node's slices as listed after a write of unknown outcome, with their version."""
        self._selector = f"spec.nodeName={node_name},spec.driver={names.driver}"
        self._informer = Informer(
            self._resource.list_resource_slice,
            name=f"slices-{node_name}",
            handler=self._on_event,
            field_selector=self._selector,
        )
        self._loop: ReconcileLoop[str] = ReconcileLoop(
            "slice-publisher",
            self._reconcile,
            stall_limit=timeouts_of(api_client).calls(_PASS_CALLS),
        )

    # -- public interface --------------------------------------------------------------------

    def start(self) -> None:
        """Start watching the node's slices and publishing."""
        self._informer.start()
        self._loop.start()
        self._loop.queue.add(_KEY)

    def stop(self) -> None:
        """Stop publishing (the slices stay) and join the threads."""
        self._loop.stop()
        self._informer.stop()

    def loops(self) -> list[Watched]:
        """Return what a watchdog looks after: the writing loop and the slice informer."""
        return [self._loop, self._informer]

    def publish(self, cards: Sequence[Card]) -> None:
        """Make ``cards`` the node's devices; unhealthy ones tainted (or left out)."""
        with self._lock:
            self._cards = tuple(cards)
            self._wanted += 1
            self._published.clear()
        self._loop.queue.add(_KEY)

    def wait_published(self, timeout: float | None) -> bool:
        """Wait until the slices match the cards last given to :meth:`publish`."""
        return self._published.wait(timeout)

    @property
    def consumable_capacity_supported(self) -> bool | None:
        """Whether the API server keeps consumable-capacity fields; ``None`` until checked."""
        return self._features.capacity

    @property
    def device_taints_supported(self) -> bool | None:
        """Whether the API server keeps device taints; ``None`` until checked."""
        return self._features.taints

    # -- reconciling ---------------------------------------------------------------------------

    def _on_event(self, _: EventType, __: Object) -> None:
        self._loop.queue.add(_KEY)

    def _reconcile(self, _: str) -> None:
        with self._lock:
            cards, wanted = self._cards, self._wanted
        if cards is None:
            return  # nothing to publish yet
        if not self._informer.synced:
            raise Requeue(_SYNC_RETRY_SECONDS, "waiting for the slice informer")
        uid = self._node_uid or self._read_node_uid()
        features = self._features
        needs_taints = any(card.health is not Health.HEALTHY for card in cards)
        desired = desired_slices(
            self._names, self._node_name, uid, cards, unhealthy=self._unhealthy_effect
        )
        has_devices = bool(desired[0]["spec"]["devices"])
        if has_devices and features.due(needs_taints=needs_taints):
            features.probe(desired[0])
        if features.capacity is False or features.taints is False:
            desired = desired_slices(
                self._names,
                self._node_name,
                uid,
                cards,
                shared=features.capacity is not False,
                unhealthy=self._unhealthy_effect if features.taints is not False else None,
            )
        self._sync(desired)
        with self._lock:
            if wanted == self._wanted:
                self._published.set()
        delay = features.recheck_in(needs_taints=needs_taints) if has_devices else None
        if delay is not None:
            raise Requeue(max(delay, _SYNC_RETRY_SECONDS), "ask the API server again")

    def _read_node_uid(self) -> str:
        try:
            node = raw.get(self._api_client, "/api/v1/nodes/{name}", name=self._node_name)
        except NotFoundError:
            log.info("slices.node_missing", node=self._node_name, retry=_NODE_RETRY_SECONDS)
            raise Requeue(_NODE_RETRY_SECONDS, "node not found") from None
        self._node_uid = str(node["metadata"]["uid"])
        return self._node_uid

    def _actual(self) -> list[Object]:
        """Return the informer's slices, overlaid with our writes it has not caught up with.

        After a write of unknown outcome, the list read then stands in for the informer's
        until the informer has seen as much.
        """
        informer_rv = _version(self._informer.resource_version)
        seen = {slice_name(s): s for s in self._informer.list()}
        if self._live is not None:
            live_rv, listed = self._live
            if informer_rv >= live_rv:
                self._live = None
            else:
                informer_rv, seen = live_rv, {slice_name(s): s for s in listed}
        for name, (rv, obj) in list(self._written.items()):
            cached = seen.get(name)
            if obj is None:  # deleted by us: hide it until the informer drops it
                if cached is not None and _rv(cached) <= rv:
                    del seen[name]
                else:
                    del self._written[name]
            elif (cached is not None and _rv(cached) >= rv) or (
                cached is None and informer_rv >= rv
            ):
                del self._written[name]  # the informer knows this write or a later change
            else:
                seen[name] = obj
        return list(seen.values())

    def _sync(self, desired: list[Object]) -> None:
        try:
            self._apply(desired)
        except RetryableError:
            self._read_back()
            raise

    def _read_back(self) -> None:
        """List the node's slices afresh, for the next pass to plan from."""
        try:
            listed = raw.call(self._resource.list_resource_slice, field_selector=self._selector)
        except ApiError as exc:
            log.warning("slices.read_back_failed", error=str(exc))
            return  # the next pass goes by the informer, as before
        version = _version(objects.metadata(listed).get("resourceVersion"))
        self._live = (version, list(listed.get("items") or []))

    def _apply(self, desired: list[Object]) -> None:
        plan = plan_sync(self._actual(), desired, self._node_name, self._last_generation)
        self._last_generation = max(self._last_generation, plan.generation)
        if plan.empty:
            return
        if (
            plan.create
            and self._read_node_uid() != desired[0]["metadata"]["ownerReferences"][0]["uid"]
        ):
            raise Requeue(0, "the Node was replaced; owner references must follow")
        for obj in plan.delete_first:
            self._delete(obj)
        for current, want in plan.update:
            metadata = {
                **current["metadata"],
                "labels": {
                    **(current["metadata"].get("labels") or {}),
                    **want["metadata"]["labels"],
                },
                "ownerReferences": want["metadata"]["ownerReferences"],
            }
            spec = carry_taint_times(current, want)["spec"]
            body = {**current, "metadata": metadata, "spec": spec}
            stored = self._write(self._resource.replace_resource_slice, slice_name(current), body)
            self._features.check_kept(want, stored)
        for want in plan.create:
            self._features.check_kept(want, self._write(self._resource.create_resource_slice, want))
        for obj in plan.delete_last:
            self._delete(obj)
        log.info(
            "slices.published",
            generation=plan.generation,
            slices=len(desired),
            devices=sum(len(s["spec"]["devices"]) for s in desired),
            updated=len(plan.update),
            created=len(plan.create),
            deleted=len(plan.delete_first) + len(plan.delete_last),
        )

    def _write(self, method: Callable[..., Any], *args: Any) -> Object:  # noqa: ANN401
        stored = raw.call(method, *args)
        self._written[slice_name(stored)] = (_rv(stored), stored)
        return stored

    def _delete(self, obj: Object) -> None:
        with contextlib.suppress(NotFoundError):  # already gone: that is what we wanted
            raw.call(self._resource.delete_resource_slice, slice_name(obj))
        self._written[slice_name(obj)] = (_rv(obj), None)
