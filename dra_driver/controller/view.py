"""The controller's picture of the cluster: informers plus its own writes not yet seen.

The informers lag behind the API server. Right after the controller allocates a claim, the
next decision must already count that claim, or two pods could get the same capacity: so
every claim the controller writes is *assumed* (as kube-scheduler's assume cache does) until
the claim informer shows that version or a newer one. The allocation snapshot is rebuilt when
a node, slice or class changes. Claims change all the time (every allocation is echoed back),
so their changes are applied to the kept snapshot instead, claim by claim, by the allocating
thread (the only one that changes it) when it next asks for the snapshot: a burst of pods on
a large cluster never rebuilds the cluster per decision.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.controller.slim import Slimmer
from dra_driver.engine import Snapshot
from dra_driver.k8s import objects
from dra_driver.k8s.compact import compact
from dra_driver.k8s.custom import CustomList
from dra_driver.k8s.informer import EventType, Informer
from dra_driver.k8s.informergroup import InformerGroup
from dra_driver.k8s.objects import Object
from dra_driver.k8s.podaffinity import Placement, relevant
from dra_driver.k8s.podfit import NodeUsage, demand
from dra_driver.k8s.scheduling import node_selector_matches
from dra_driver.k8s.versions import FirstServed

Listener = Callable[[str, EventType, Object], None]
"""Called with the informer name ("pods", "claims", "slices", "classes", "nodes",
"taintrules", "quotas", "budgets")."""
_version = objects.resource_version_number


class ClusterView(InformerGroup):
    """Informers for the objects allocation reads, and the snapshot.

    Pods, claims, slices, classes, nodes, PodDisruptionBudgets (for preemption),
    DeviceTaintRules and GpuShareQuotas. The last two
    are optional: DeviceTaintRules are read in whichever version the API server serves, and
    not at all while it serves none (DRADeviceTaintRules off, as 1.36 ships it); without the
    quota CRD no quota applies.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        names: DriverNames,
        listener: Listener,
        *,
        share_plain: bool = True,
    ) -> None:
        core, resource = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)
        self.names = names
        self._share_plain = share_plain
        self._listener = listener
        self._lock = threading.Lock()
        self._assumed: dict[tuple[str, str], Object] = {}
        self._snapshot: Snapshot | None = None
        self._generation = 0
        """Bumped by every change that needs a rebuild; a build is kept only if unchanged."""
        self._pending: dict[tuple[str, str], set[str]] = {}
        """Claims changed since the snapshot last caught up, with every UID seen per name."""
        self.usage = NodeUsage()
        """What the pods bound to each node request, for the pod's own fit on a node."""
        self.writing: set[tuple[str, str]] = set()
        """Claims the allocator has writes in flight for: the watch may show them half done."""
        self._gated: dict[tuple[str, str], None] = {}
        """Pods the cache shows behind this driver's gate, in the order it first showed them."""

        def informer(
            name: str,
            list_func: Callable[..., Any],
            field_selector: str | None = None,
            transform: Callable[[Object], Object] | None = None,
            *,
            optional: bool = False,
        ) -> Informer:
            return Informer(
                list_func,
                name=f"controller-{name}",
                handler=lambda kind, obj: self._changed(name, kind, obj),
                field_selector=field_selector,
                transform=transform,
                optional=optional,
            )

        slim = Slimmer()
        self.pods = informer("pods", core.list_pod_for_all_namespaces, transform=slim.pod)
        self.claims = informer(
            "claims", resource.list_resource_claim_for_all_namespaces, transform=slim.claim
        )
        self.slices = informer(
            "slices",
            resource.list_resource_slice,
            field_selector=f"spec.driver={names.driver}",
            transform=compact,
        )
        self.classes = informer("classes", resource.list_device_class)
        self.nodes = informer("nodes", core.list_node, transform=slim.node)
        taint_rules = FirstServed(
            "devicetaintrules",
            resource.list_device_taint_rule,
            client.ResourceV1beta2Api(api_client).list_device_taint_rule,
            client.ResourceV1alpha3Api(api_client).list_device_taint_rule,
        )
        self.taint_rules = informer("taintrules", taint_rules, optional=True)
        # Optional: without the CRD (a chart installed without it) no quota applies.
        self.quotas = informer(
            "quotas",
            CustomList(api_client, *names.quota_group_version, names.quota_plural),
            optional=True,
        )
        # PodDisruptionBudgets: preemption picks victims whose budgets allow their eviction.
        self.budgets = informer(
            "budgets",
            client.PolicyV1Api(api_client).list_pod_disruption_budget_for_all_namespaces,
            transform=compact,
        )
        # They run whether or not this replica leads, so a failover starts with warm caches.
        super().__init__(
            self.pods,
            self.claims,
            self.slices,
            self.classes,
            self.nodes,
            self.taint_rules,
            self.quotas,
            self.budgets,
        )

    def _changed(self, name: str, kind: EventType, obj: Object) -> None:
        if name == "pods":
            self.usage.update(obj, deleted=kind == "DELETED")
        with self._lock:
            if name == "pods":
                if kind != "DELETED" and objects.has_scheduling_gate(
                    obj, self.names.scheduling_gate
                ):
                    self._gated.setdefault(_key(obj), None)
                else:
                    self._gated.pop(_key(obj), None)
            if name not in ("pods", "claims", "quotas", "budgets"):
                self._snapshot = None
                self._generation += 1
            if name == "claims":
                key = _key(obj)
                self._pending.setdefault(key, set()).add(objects.uid(obj))
                assumed = self._assumed.get(key)
                if assumed is not None and (
                    kind == "DELETED"
                    or objects.uid(assumed) != objects.uid(obj)
                    or _version(obj) >= _version(assumed)
                ):
                    del self._assumed[key]
        self._listener(name, kind, obj)

    def gated_pods(self) -> list[Object]:
        """Return the cached pods behind this driver's scheduling gate.

        Kept as the pods change, so finding them costs what they are, not what the cluster
        runs: it is asked on every change that may give a waiting pod its room.
        """
        with self._lock:
            keys = list(self._gated)
        return [pod for key in keys if (pod := self.pods.get(*key)) is not None]

    def is_gated(self, namespace: str, name: str) -> bool:
        """Whether the cache shows the pod behind this driver's scheduling gate."""
        with self._lock:
            return (namespace, name) in self._gated

    # -- claims, with our own writes ----------------------------------------------------------

    def claim(self, namespace: str, name: str) -> Object | None:
        """Return the newest claim we know: our own write if the informer has not caught up."""
        with self._lock:
            assumed = self._assumed.get((namespace, name))
        cached = self.claims.get(namespace, name)
        if assumed is not None and (cached is None or _version(assumed) > _version(cached)):
            return assumed
        return cached

    def all_claims(self) -> list[Object]:
        """Return every claim, our unseen writes replacing their stale copies."""
        with self._lock:
            assumed = dict(self._assumed)
        merged = {_key(claim): claim for claim in self.claims.list()}
        for key, claim in assumed.items():
            if _version(claim) > _version(merged.get(key)):
                merged[key] = claim
        return list(merged.values())

    def has_seen(self, claims: Iterable[Object]) -> bool:
        """Whether the claim watch has handed on these versions of the claims.

        A watch delivers a resource's changes in resourceVersion order, and the informer
        moves its version on only after the handler ran: once it is at or past a claim's
        version, every claim write the API server took before that one is in the cache and
        pending for the snapshot, whoever made it.
        """
        seen = objects.version_number(self.claims.resource_version)
        return all(_version(claim) <= seen for claim in claims)

    def assume(self, written: Object, *, in_place: bool = False) -> None:
        """Record a claim we just wrote, so the next decision counts it.

        ``in_place`` (the allocating thread only: no other thread changes the cached
        snapshot) applies the write to the cached snapshot at once. Every write is also left
        pending, so the allocating thread applies it when it next asks for the snapshot: a
        snapshot another thread was building from older informer contents, and cached
        meanwhile, catches up instead of serving the write's capacity twice.
        """
        with self._lock:
            if _version(written) > _version(self.claims.get(*_key(written))):
                self._assumed[_key(written)] = written
            if in_place and self._snapshot is not None:
                self._snapshot.update_claim(written)
            self._pending.setdefault(_key(written), set()).add(objects.uid(written))

    # -- the allocation snapshot ----------------------------------------------------------

    def cached_snapshot(self) -> Snapshot | None:
        """Return the cached snapshot, never building one (for readers on other threads)."""
        with self._lock:
            return self._snapshot

    def snapshot(self) -> Snapshot:
        """Return the current snapshot, rebuilding it if something changed (allocator only)."""
        with self._lock:
            snapshot, generation = self._snapshot, self._generation
            pending, self._pending = self._pending, {}
        if snapshot is not None:
            self._catch_up(snapshot, pending)
            return snapshot
        # A build reads every claim as it is now, so what was pending is in it already.
        snapshot = Snapshot.build(
            self.names,
            nodes=self.nodes.list(),
            slices=self.slices.list(),
            classes=self.classes.list(),
            claims=self.all_claims(),
            taint_rules=self.taint_rules.list(),
            share_plain=self._share_plain,
        )
        with self._lock:
            # A change while building may have made it stale already: then it serves this
            # decision only, and the next one builds afresh.
            if generation == self._generation:
                self._snapshot = snapshot
        return snapshot

    def _catch_up(self, snapshot: Snapshot, pending: dict[tuple[str, str], set[str]]) -> None:
        """Count the changed claims as they are now (ours included), dropping deleted ones."""
        for key, uids in pending.items():
            current = self.claim(*key)
            current_uid = objects.uid(current) if current is not None else ""
            # A relist can replace a deleted claim by a new one of the same name with no
            # event for the old UID: whatever the snapshot counts under the name goes too.
            stale = {snapshot.counted_names.get(key, current_uid), *uids} - {current_uid}
            for uid in stale:
                snapshot.remove_claim(uid)
            counted = snapshot.counted.get(current_uid)
            if current is not None and (counted is None or _version(counted) != _version(current)):
                snapshot.update_claim(current)

    # -- who wants a claim --------------------------------------------------------------------

    def node_fit(self, pod: Object) -> Callable[[Object], str | None]:
        """Return why a node has no place for ``pod`` itself (resources, ports, affinity, spread).

        Affinity and spread read every pod and node, so only for a pod they can concern.
        """
        need = demand(pod)
        placement = None
        if relevant(pod, self.usage.anti_affinity_holders()):
            placement = Placement(pod, self.pods.list(), self.nodes.list())

        def unfit(node: Object) -> str | None:
            reason = self.usage.unfit(need, node)
            if reason is None and placement is not None:
                reason = placement.unfit(node)
            return reason

        return unfit

    def nodes_overlap(self, selectors: list[Object]) -> bool:
        """Whether some node satisfies every one of ``selectors`` (claims' nodeSelectors)."""
        return not selectors or any(
            all(node_selector_matches(s, node) for s in selectors) for node in self.nodes.list()
        )

    def pods_using(self, claim: Object) -> Iterable[Object]:
        """Return the cached pods that reference ``claim`` and may still run."""
        return pods_referring(self.pods.list(), claim)


def pinned_selectors(claims: Iterable[Object]) -> list[Object]:
    """Return the nodeSelectors of the claims that are allocated (where they pin the pod)."""
    return [
        allocation["nodeSelector"]
        for claim in claims
        if (allocation := objects.status(claim).get("allocation"))
        and allocation.get("nodeSelector")
    ]


def pods_referring(pods: Iterable[Object], claim: Object) -> Iterable[Object]:
    """Return the pods among ``pods`` that reference ``claim`` and may still run."""
    namespace, name = _key(claim)
    for pod in pods:
        if objects.metadata(pod).get("namespace") != namespace:
            continue
        if objects.is_terminal(pod):
            continue
        if name in objects.pod_claim_names(pod).values():
            yield pod


def _key(obj: Object) -> tuple[str, str]:
    metadata = objects.metadata(obj)
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
