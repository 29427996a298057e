"""A controller harness for exact interleavings: real ClusterView, Allocator and Releaser.

The informer caches are filled by hand and a fake writer stores claims like the API server
(resourceVersion checks), so a test decides exactly when each write becomes visible to the
informers (``Server.deliver``): the watch lag that real races depend on. With preemption on,
the Server is also the Preemptor's EvictionWriter (nominations, and evictions that honour the
PodDisruptionBudgets it stores), and the clock is the test's.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import itertools
from collections.abc import Callable
from typing import Any

from controller.kit import NAMES, slices_of
from gpushare_simulator.harness.cluster import node_object
from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.api import Backend
from dra_driver.api.classes import default_device_classes
from dra_driver.controller.allocator import Allocator
from dra_driver.controller.evictions import Evicted, Refused
from dra_driver.controller.metrics import ControllerMetrics
from dra_driver.controller.preemption import Preemptor
from dra_driver.controller.releaser import Releaser
from dra_driver.controller.view import ClusterView
from dra_driver.engine import Policy
from dra_driver.engine.nomination import PodRef
from dra_driver.k8s.errors import ConflictError, InvalidError
from dra_driver.k8s.informer import object_key
from dra_driver.k8s.reconcile import Requeue
from dra_driver.k8s.scheduling import label_selector_matches
from dra_driver.k8s.timestamps import rfc3339
from dra_driver.nvml.inventory import NodeInventory
from dra_driver.quota import QuotaBook

Object = dict[str, Any]
_versions = itertools.count(100)


class Events:
    """Records events instead of writing them."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, str]] = []

    def record(self, obj: Object, kind: str, reason: str, message: str) -> None:
        """Keep (object name, reason, message)."""
        del kind
        self.items.append((obj["metadata"]["name"], reason, message))


class Clock:
    """The time the test controls, in seconds since the epoch; it moves only when told."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        """Return the time now."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the time on by ``seconds``."""
        self.now += seconds


class Gone(dict[str, Any]):
    """A deleted object as its DELETED watch event carries it: its last state, a new version."""


class Server:
    """The authoritative store and a ClaimWriter; ``deliver`` feeds pending events to informers.

    Also an EvictionWriter: ``nominate`` and ``evict``, which marks the pod deleting unless a
    PodDisruptionBudget of kind ``budgets`` covering it allows no more disruptions.
    """

    def __init__(
        self, view: ClusterView, finalizer: str, annotation: str = "", clock: Clock | None = None
    ) -> None:
        self.view, self.finalizer, self.annotation = view, finalizer, annotation
        self.clock = clock or Clock()
        self.objs: dict[tuple[str, str, str], Object] = {}
        self.pending: list[tuple[str, Object]] = []
        self.evictions: list[PodRef] = []
        """Pods ``evict`` marked deleting, in order."""

    def put(self, kind: str, obj: Object, *, deliver: bool = True) -> Object:
        """Store an object with a new resourceVersion; deliver it to the informers now or later."""
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(_versions))
        self.objs[(kind, *object_key(obj))] = obj
        self.pending.append((kind, obj))
        if deliver:
            self.deliver()
        return copy.deepcopy(obj)

    def deliver(self, changes: list[tuple[str, Object]] | None = None) -> None:
        """Deliver ``changes`` (default: every pending one) in order, as a watch would."""
        if changes is None:
            changes, self.pending = self.pending, []
        for kind, obj in changes:
            informer = getattr(self.view, kind)
            gone = isinstance(obj, Gone)
            with informer._lock:
                if gone:
                    informer._cache.pop(object_key(obj), None)
                else:
                    informer._cache[object_key(obj)] = obj
            self.view._changed(kind, "DELETED" if gone else "MODIFIED", obj)
            informer.resource_version = obj["metadata"]["resourceVersion"]

    def delete(self, kind: str, namespace: str, name: str, *, deliver: bool = True) -> None:
        """Remove an object; its DELETED event reaches the informers now or later."""
        obj = self.objs.pop((kind, namespace, name), None)
        if obj is None:
            return
        gone = Gone(copy.deepcopy(obj))
        gone["metadata"]["resourceVersion"] = str(next(_versions))
        self.pending.append((kind, gone))
        if deliver:
            self.deliver()

    def _current(self, kind: str, body: Object) -> Object:
        current = self.objs[(kind, *object_key(body))]
        if current["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise ConflictError("the object has been modified")
        return copy.deepcopy(current)

    def add_finalizer(self, claim: Object) -> Object:
        """ClaimWriter.add_finalizer."""
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if self.finalizer in finalizers:
            return claim
        return self._finalizers(claim, [*finalizers, self.finalizer])

    def remove_finalizer(self, claim: Object) -> Object:
        """ClaimWriter.remove_finalizer."""
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if self.finalizer not in finalizers:
            return claim
        return self._finalizers(claim, [f for f in finalizers if f != self.finalizer])

    def _finalizers(self, claim: Object, finalizers: list[str]) -> Object:
        current = self._current("claims", claim)
        current["metadata"]["finalizers"] = finalizers
        return self.put("claims", current, deliver=False)

    def write_allocation(
        self, claim: Object, allocation: Object, reserved_for: list[Object]
    ) -> Object:
        """ClaimWriter.write_allocation."""
        current = self._current("claims", claim)
        current.setdefault("status", {})["allocation"] = allocation
        if reserved_for:
            current["status"]["reservedFor"] = reserved_for
        return self.put("claims", current, deliver=False)

    def allocate_protected(
        self, claim: Object, allocation: Object, reserved_for: list[Object]
    ) -> Object:
        """ClaimWriter.allocate_protected: two patches, no resourceVersion, UID and set-once."""
        current = copy.deepcopy(self.objs[("claims", *object_key(claim))])
        if current["metadata"].get("uid") != claim["metadata"].get("uid"):
            raise InvalidError("metadata.uid: field is immutable")
        if (current.get("status") or {}).get("allocation") not in (None, allocation):
            raise InvalidError("status.allocation: field is immutable")
        current.setdefault("status", {})["allocation"] = allocation
        if reserved_for:
            current["status"]["reservedFor"] = reserved_for
        self.put("claims", current, deliver=False)
        finalizers = list(current["metadata"].get("finalizers") or [])
        if self.finalizer not in finalizers:
            current["metadata"]["finalizers"] = [*finalizers, self.finalizer]
            return self.put("claims", current, deliver=False)
        return copy.deepcopy(self.objs[("claims", *object_key(claim))])

    def clear_allocation(self, claim: Object) -> Object:
        """ClaimWriter.clear_allocation."""
        current = self._current("claims", claim)
        status = current.get("status") or {}
        current["status"] = {
            k: v for k, v in status.items() if k not in ("allocation", "reservedFor")
        }
        return self.put("claims", current, deliver=False)

    def read_claim(self, claim: Object) -> Object | None:
        """ClaimWriter.read_claim."""
        return copy.deepcopy(self.objs.get(("claims", *object_key(claim))))

    def read_pod(self, namespace: str, name: str) -> Object | None:
        """ClaimWriter.read_pod."""
        return copy.deepcopy(self.objs.get(("pods", namespace, name)))

    def list_pods(self, namespace: str) -> list[Object]:
        """ClaimWriter.list_pods."""
        return [
            copy.deepcopy(obj)
            for (kind, ns, _), obj in self.objs.items()
            if kind == "pods" and ns == namespace
        ]

    def remove_gate(self, pod: Object, gate: str) -> bool:
        """ClaimWriter.remove_gate."""
        current = copy.deepcopy(self.objs[("pods", *object_key(pod))])
        gates = current["spec"].get("schedulingGates") or []
        if not any(g["name"] == gate for g in gates):
            return False
        current["spec"]["schedulingGates"] = [g for g in gates if g["name"] != gate]
        self.put("pods", current, deliver=False)
        return True

    def nominate(self, claim: Object, value: str | None) -> Object:
        """EvictionWriter.nominate: the annotation set (``None``: removed) at its version."""
        current = self._current("claims", claim)
        annotations = dict(current["metadata"].get("annotations") or {})
        if annotations.get(self.annotation) == value:
            return current  # a merge patch that changes nothing keeps the resourceVersion
        if value is None:
            del annotations[self.annotation]
        else:
            annotations[self.annotation] = value
        current["metadata"]["annotations"] = annotations
        return self.put("claims", current, deliver=False)

    def evict(self, pod: PodRef) -> Evicted | Refused:
        """EvictionWriter.evict, as the Eviction API does it: budgets first, then deletion.

        A pod gone or re-created (UID precondition), or deleting already, counts as evicted;
        a finished or pending one is deleted without asking its budgets (as ``canIgnorePDB``).
        """
        current = copy.deepcopy(self.objs.get(("pods", pod.namespace, pod.name)))
        if current is None or current["metadata"].get("uid") != pod.uid:
            return Evicted()
        metadata = current["metadata"]
        if metadata.get("deletionTimestamp"):
            return Evicted()
        phase = (current.get("status") or {}).get("phase")
        covering = [
            budget
            for (kind, namespace, _), budget in self.objs.items()
            if kind == "budgets"
            and namespace == pod.namespace
            and phase not in ("Succeeded", "Failed", "Pending")
            and label_selector_matches(
                (budget.get("spec") or {}).get("selector"), metadata.get("labels") or {}
            )
        ]
        for budget in covering:
            if (budget.get("status") or {}).get("disruptionsAllowed", 0) < 1:
                name = budget["metadata"]["name"]
                return Refused(
                    f"Cannot evict pod as it would violate the pod's disruption budget {name}"
                )
        for budget in covering:
            spent = copy.deepcopy(budget)
            spent["status"]["disruptionsAllowed"] -= 1
            self.put("budgets", spent, deliver=False)
        moment = datetime.datetime.fromtimestamp(self.clock(), datetime.UTC)
        metadata["deletionTimestamp"] = rfc3339(moment)
        metadata["deletionGracePeriodSeconds"] = current["spec"].get(
            "terminationGracePeriodSeconds", 30
        )
        self.put("pods", current, deliver=False)
        self.evictions.append(pod)
        return Evicted()

    def claims(self) -> list[Object]:
        """Every stored claim."""
        return [obj for (kind, *_), obj in self.objs.items() if kind == "claims"]

    def nodes_of_claims(self) -> dict[str, str]:
        """Claim name -> the node its allocation pins it to."""
        nodes = {}
        for claim in self.claims():
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                term = allocation["nodeSelector"]["nodeSelectorTerms"][0]
                nodes[claim["metadata"]["name"]] = term["matchFields"][0]["values"][0]
        return nodes


@dataclasses.dataclass
class Harness:
    """One controller process over a Server: its view, reconcilers, events and metrics."""

    view: ClusterView
    server: Server
    allocator: Allocator
    releaser: Releaser
    events: Events
    registry: CollectorRegistry
    preemptor: Preemptor | None
    nodes: tuple[NodeInventory, ...]
    options: dict[str, Any]

    @property
    def clock(self) -> Clock:
        """The clock the test controls (the Server's, the Preemptor's and the Allocator's)."""
        return self.server.clock

    def sample(self, name: str, **labels: str) -> float:
        """Return a metric sample of this process (0 when never set)."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def restart(self) -> Harness:
        """Start a new process (after a crash) over the same store: fresh caches, listed anew."""
        fresh = build(*self.nodes, clock=self.clock, **self.options)
        fresh.server.objs = self.server.objs
        fresh.server.evictions = self.server.evictions
        listed = sorted(self.server.objs.items(), key=lambda item: _version(item[1]))
        fresh.server.deliver([(kind, obj) for (kind, *_), obj in listed])
        return fresh


def _version(obj: Object) -> int:
    return int(obj["metadata"]["resourceVersion"])


def build(
    *nodes: NodeInventory,
    default_backend: Backend = Backend.NONE,
    shared: bool = True,
    alone: Callable[[], bool] | None = None,
    preemption: bool = False,
    clock: Clock | None = None,
) -> Harness:
    """Build a view over hand-fed caches, a Server, and the controller's two reconcilers.

    The plugins' default backend is ``none`` unless given: pods share claims here to race the
    allocation and release protocol, which a hami-core claim would serve one pod at a time.
    ``shared=False`` publishes whole-only cards (no consumable capacity). With ``alone`` the
    allocator is a leader (leader election on) whose Lease is firm while ``alone()`` holds.
    ``preemption`` gives the allocator a Preemptor whose EvictionWriter is the Server; every
    part reads time from ``clock`` (a new one by default).
    """
    view = ClusterView(client.ApiClient(), NAMES, lambda *_: None)
    for informer in view.informers:
        informer._synced.set()
    clock = clock or Clock()
    server = Server(view, NAMES.finalizer, NAMES.nomination_annotation, clock)
    for inventory in nodes:
        server.put("nodes", node_object(inventory))
    for slice_ in slices_of(nodes, shared=shared):
        server.put("slices", slice_)
    for device_class in default_device_classes(NAMES):
        server.put("classes", device_class)
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    events = Events()
    preemptor = None
    if preemption:
        preemptor = Preemptor(
            NAMES,
            view,
            writer=server,  # type: ignore[arg-type]
            events=events,
            metrics=metrics,
            policy=Policy(),  # type: ignore[arg-type]
            clock=clock,
        )
    allocator = Allocator(
        NAMES,
        view,
        writer=server,
        events=events,
        metrics=metrics,
        policy=Policy(),  # type: ignore[arg-type]
        default_backend=default_backend,
        clock=clock,
        elected=alone is not None,
        alone=alone or (lambda: False),
        quotas=QuotaBook(view.quotas),
        preemptor=preemptor,
    )
    releaser = Releaser(NAMES, view, server, metrics)  # type: ignore[arg-type]
    options = {
        "default_backend": default_backend,
        "shared": shared,
        "alone": alone,
        "preemption": preemption,
    }
    return Harness(view, server, allocator, releaser, events, registry, preemptor, nodes, options)


def make(
    *nodes: NodeInventory,
    default_backend: Backend = Backend.NONE,
    shared: bool = True,
    alone: Callable[[], bool] | None = None,
    preemption: bool = False,
    clock: Clock | None = None,
) -> tuple[ClusterView, Server, Allocator, Releaser, Events]:
    """:func:`build`'s view, Server, Allocator, Releaser and Events (the Server has the clock)."""
    made = build(
        *nodes,
        default_backend=default_backend,
        shared=shared,
        alone=alone,
        preemption=preemption,
        clock=clock,
    )
    return made.view, made.server, made.allocator, made.releaser, made.events


def claim_obj(
    name: str,
    cores: str | None = None,
    memory: str | None = None,
    *,
    by_config: bool = False,
    device_class: str = NAMES.default_device_class,
) -> Object:
    """Return a claim for one share of ``device_class`` (no request: a whole card).

    ``by_config``: the size is in its GpuShareConfig, as without consumable capacity. The
    default class's shares are online; ``NAMES.offline_device_class`` makes them offline.
    """
    exactly: Object = {"deviceClassName": device_class}
    devices: Object = {"requests": [{"name": "gpu", "exactly": exactly}]}
    capacity = {k: v for k, v in (("cores", cores), ("memory", memory)) if v}
    if capacity and by_config:
        parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind}
        devices["config"] = [{"opaque": {"driver": NAMES.driver, "parameters": parameters}}]
        parameters.update(capacity)
    elif capacity:
        exactly["capacity"] = {"requests": capacity}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def pod_obj(name: str, *claims: str) -> Object:
    """Return a gated pod using the named claims."""
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"pod-{name}"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimName": claim} for i, claim in enumerate(claims)
            ],
            "schedulingGates": [{"name": NAMES.scheduling_gate}],
        },
        "status": {"phase": "Pending"},
    }


def settle(allocator: Allocator, server: Server, pod: str, passes: int = 4) -> None:
    """Reconcile the pod pass after pass, the watch catching up in between, until it is done."""
    for _ in range(passes):
        try:
            allocator.reconcile(("default", pod))
        except Requeue:
            server.deliver()
            continue
        server.deliver()
        return
    raise AssertionError(f"pod {pod} still wants another pass after {passes}")
