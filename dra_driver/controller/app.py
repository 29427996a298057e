"""``gpushare-dra controller``: wiring and lifecycle of the allocation controller.

Every replica keeps its informers warm; only the leader runs the allocation and release loops,
so a failover starts deciding at once. A replica that loses its Lease stops its loops and
exits non-zero, as client-go controllers do, and Kubernetes restarts it as a follower: that
is simpler and safer than trying to resume mid-term.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Final

from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.api import Backend, DriverNames
from dra_driver.controller.allocator import CATCH_UP, Allocator
from dra_driver.controller.evictions import EvictionWriter
from dra_driver.controller.metrics import CardCollector, ControllerMetrics, GatedCollector
from dra_driver.controller.preemption import Preemptor
from dra_driver.controller.quotas import QuotaCollector, QuotaStatus
from dra_driver.controller.releaser import Releaser, released_by_change
from dra_driver.controller.settings import ControllerSettings
from dra_driver.controller.view import ClusterView
from dra_driver.controller.writes import ClaimWriter
from dra_driver.engine import Policy
from dra_driver.k8s import objects
from dra_driver.k8s.client import timeouts_of
from dra_driver.k8s.events import EventRecorder, EventSender
from dra_driver.k8s.informer import EventType, object_key
from dra_driver.k8s.leader import LeaderElectionSettings, LeaderElector
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import ReconcileLoop
from dra_driver.logging import carry, get_logger
from dra_driver.metrics.watchdog import Watched, register_silence
from dra_driver.quota import QuotaBook

Key = tuple[str, str]

log = get_logger(__name__)

COMPONENT: Final = "gpushare-controller"
_QUOTA_BATCH_SECONDS: Final = 0.5
"""How long a quota's recount waits for more claim changes to count with it."""
_CATCH_UP_SECONDS: Final = 0.5
"""How stale the card metrics may be while no pod is decided (a decision catches up first)."""
_PASS_CALLS: Final = 4
"""API calls one pass may wait out: a claim write and its read-back, then the gate's two."""


def policy_of(settings: ControllerSettings) -> Policy:
    """Return the engine policy the settings describe."""
    return Policy(
        node=settings.node_placement,
        online=settings.gpu_placement_online,
        offline=settings.gpu_placement_offline,
    )


class Controller:
    """The allocation controller; ``start`` returns at once, ``lost`` fires on lost leadership.

    ``default_backend`` is the kubelet plugins' backend for claims whose config names none.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        names: DriverNames,
        settings: ControllerSettings,
        registry: CollectorRegistry,
        default_backend: Backend = Backend.HAMI_CORE,
    ) -> None:
        self._names, self._settings = names, settings
        self.metrics = ControllerMetrics(registry)
        self.view = ClusterView(
            api_client, names, self._on_change, share_plain=settings.share_whole_only_cards
        )
        registry.register(CardCollector(self.view.cached_snapshot))
        registry.register(GatedCollector(self.view.gated_pods, names.scheduling_gate, time.time))
        register_silence(registry, self.loops)
        writer = ClaimWriter(api_client, names.finalizer)
        self._events = EventSender(EventRecorder(api_client, COMPONENT))
        book = QuotaBook(self.view.quotas)
        quota_status = QuotaStatus(
            names,
            api_client,
            quotas=self.view.quotas,
            book=book,
            claims=self.view.all_claims,
            slices=self.view.slices.list,
            events=self._events,
        )
        registry.register(QuotaCollector(quota_status.exported))
        preemptor = None
        if settings.preemption:
            preemptor = Preemptor(
                names,
                self.view,
                writer=EvictionWriter(api_client, writer, names.nomination_annotation),
                events=self._events,
                metrics=self.metrics,
                policy=policy_of(settings),
                clock=time.time,
            )
        allocator = Allocator(
            names,
            self.view,
            writer=writer,
            events=self._events,
            metrics=self.metrics,
            policy=policy_of(settings),
            default_backend=default_backend,
            elected=settings.leader_elect,
            alone=lambda: self._elector is not None and self._elector.holds_firmly(),
            quotas=book,
            preemptor=preemptor,
        )
        releaser = Releaser(names, self.view, writer, self.metrics)
        stall_limit = timeouts_of(api_client).calls(_PASS_CALLS)
        # One allocating worker: each decision must see the capacity the previous one took.
        self._allocations: ReconcileLoop[Key] = ReconcileLoop(
            "allocate", allocator.reconcile, stall_limit=stall_limit
        )
        self._releases: ReconcileLoop[Key] = ReconcileLoop(
            "release", releaser.reconcile, stall_limit=stall_limit
        )
        self._quota_status: ReconcileLoop[Key] = ReconcileLoop(
            "quota-status", quota_status.reconcile, stall_limit=stall_limit
        )
        self._leading = threading.Event()
        self._stopping = threading.Event()
        self._resync_stop = threading.Event()
        self._term = threading.Lock()
        """Serialises starting and ending the leader's term."""
        self._ended = False
        """Leadership was lost: this object never leads again (the process restarts)."""
        self.lost = threading.Event()
        self._resync: threading.Thread | None = None
        self._elector: LeaderElector | None = None
        if settings.leader_elect:
            self._elector = LeaderElector(
                api_client,
                LeaderElectionSettings(
                    lease_name=f"{names.driver}-controller",
                    namespace=settings.leader_election_namespace,
                    identity=settings.leader_election_identity or socket.gethostname(),
                    lease_duration=settings.lease_duration,
                    renew_deadline=settings.renew_deadline,
                    retry_period=settings.retry_period,
                ),
                on_started_leading=self._lead,
                on_stopped_leading=self._lose,
            )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the informers and campaign (or lead at once without leader election)."""
        self._events.start()
        self.view.start()
        if self._elector is not None:
            self._elector.start()
        else:
            self._lead()

    def stop(self) -> None:
        """Stop leading and watching; in-flight reconciles finish first."""
        self._stopping.set()
        if self._elector is not None:
            self._elector.stop()
        with self._term:
            self._ended = True
            self._stop_loops()
        self.view.stop()
        self._events.stop()

    def loops(self) -> list[Watched]:
        """Return the loops a watchdog looks after: both workers and every informer."""
        return [self._allocations, self._releases, self._quota_status, *self.view.informers]

    @property
    def leading(self) -> bool:
        """Whether this replica runs the loops now."""
        return self._leading.is_set()

    def _lead(self) -> None:
        # Runs in the elector's thread. Leadership can end while the informers sync, so the
        # term is checked again under the lock before anything starts.
        while not self.view.wait_synced(timeout=0.2):
            if self._term_over():
                return
        # Built now, before the loops run: else the first pod after a start or a failover
        # waits while every device of the cluster is read (over a second at 1,000 nodes).
        self.view.snapshot()
        with self._term:
            if self._term_over():
                return
            log.info("controller.leading")
            self.metrics.is_leader.set(1)
            self._resync_stop.clear()
            self._leading.set()
            self._allocations.start()
            self._releases.start()
            self._quota_status.start()
            self._resync = threading.Thread(
                target=carry(self._resync_loop), name="resync", daemon=True
            )
            self._resync.start()
        self._enqueue_everything()

    def _term_over(self) -> bool:
        return self._stopping.is_set() or self.lost.is_set() or self._ended

    def _lose(self) -> None:
        with self._term:
            self._ended = True
            if self._leading.is_set():
                log.warning("controller.leadership_lost")
            self._stop_loops()
        if not self._stopping.is_set():
            self.lost.set()

    def _stop_loops(self) -> None:
        self.metrics.is_leader.set(0)
        was_leading = self._leading.is_set()
        self._leading.clear()
        self._resync_stop.set()
        if was_leading:
            self._allocations.stop()
            self._releases.stop()
            self._quota_status.stop()
        if self._resync is not None and self._resync is not threading.current_thread():
            self._resync.join()

    def _resync_loop(self) -> None:
        while not self._resync_stop.wait(self._settings.resync_seconds):
            self._enqueue_everything()

    # -- what to look at when something changes ------------------------------------------

    def _enqueue_everything(self) -> None:
        self._enqueue_gated_pods()
        self._enqueue_quotas(None)
        for claim in self.view.claims.list():
            # Tentative claims carry no finalizer yet; one whose pod went away while no
            # replica led has no event left to bring it to the releaser.
            if self._names.finalizer in (claim["metadata"].get("finalizers") or []) or (
                claim.get("status") or {}
            ).get("allocation"):
                self._releases.queue.add(object_key(claim))

    def _enqueue_gated_pods(self) -> None:
        for pod in self.view.gated_pods():
            self._allocations.queue.add(object_key(pod))

    def _on_change(self, informer: str, kind: EventType, obj: Object) -> None:
        # Every key queued wakes a worker thread: only changes its reconcile can act on are
        # handed on, the others (most of what a busy cluster's pods and claims do) stop here.
        if not self._leading.is_set():
            return
        if informer == "pods":
            self._on_pod(kind, obj)
        elif informer == "claims":
            self._on_claim(kind, obj)
        elif informer == "quotas":
            self._quota_status.queue.add(object_key(obj))
            self._enqueue_gated_pods()  # a quota raised or gone: room for who waits on it
        else:
            self._enqueue_gated_pods()
            if informer == "slices":
                self._enqueue_quotas(None)  # a card's memory counts for whole-card claims

    def _on_pod(self, kind: EventType, pod: Object) -> None:
        if objects.has_scheduling_gate(pod, self._names.scheduling_gate):
            self._allocations.queue.add(object_key(pod))
        ended = kind == "DELETED" or objects.is_terminal(pod)
        if ended or objects.is_deleting(pod):
            # Its claims may have nothing left to run for: theirs to release.
            namespace = objects.namespace(pod)
            for name in objects.pod_claim_names(pod).values():
                if name:
                    self._releases.queue.add((namespace, name))
        if ended and objects.spec(pod).get("nodeName"):
            self._enqueue_gated_pods()  # its CPU, memory, ports and affinity are room again

    def _on_claim(self, kind: EventType, claim: Object) -> None:
        namespace = objects.namespace(claim)
        allocation = objects.status(claim).get("allocation")
        if released_by_change(self._names, claim):
            self._releases.queue.add(object_key(claim))
        # Metrics read the snapshot: it catches up on a burst of changes once.
        self._allocations.queue.add_after(CATCH_UP, _CATCH_UP_SECONDS)
        # Its pod may wait at the gate for this claim. A pod the cache does not show yet (the
        # two watches deliver in any order) is queued by its own event.
        owner = objects.controller_reference(claim) or {}
        if owner.get("kind") == "Pod" and self.view.is_gated(namespace, str(owner.get("name"))):
            self._allocations.queue.add((namespace, str(owner["name"])))
        if kind == "DELETED" or (kind == "MODIFIED" and not allocation):
            self._enqueue_gated_pods()  # capacity may have been freed; a new claim frees none
        self._enqueue_quotas(namespace)

    def _enqueue_quotas(self, namespace: str | None) -> None:
        """Recount the quotas of ``namespace`` (every namespace's for ``None``), batched."""
        for quota in self.view.quotas.list():
            if namespace is None or objects.namespace(quota) == namespace:
                # Delayed and deduplicated: a burst of claim changes costs one recount.
                self._quota_status.queue.add_after(object_key(quota), _QUOTA_BATCH_SECONDS)
