"""Synthetic GPU-share workloads for benchmarks and load runs against the harness.

:func:`plan_wave` draws pods with fractional shares: most use a per-size
ResourceClaimTemplate (each pod gets its own claim), some share a named ResourceClaim with a
few other pods. :class:`Tracker` watches the pods and claims and records when each pod was
created, had every claim allocated, lost our scheduling gate, was bound and ran, so latency is
measured the same way whoever allocates. What a finished workload must not leave behind is in
:mod:`gpushare_simulator.harness.endstate`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import random
import threading
import time
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Final

from kubernetes import client

from dra_driver.api import Backend, DriverNames
from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import NotFoundError
from dra_driver.k8s.informer import EventType, Informer
from dra_driver.k8s.informergroup import InformerGroup
from dra_driver.k8s.objects import Object
from dra_driver.plan.inventory import node_slices
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.kubeapply import Applier
from gpushare_simulator.harness.processes import ComponentProcess, start_controller

HARNESS_USER_AGENT: Final = "gpushare-harness"
"""What the harness's own client sends, so the API server's counts tell it from the driver."""
CONTAINER_CLAIM: Final = "gpu"
_MIB: Final = 1024**2
_POLL_SECONDS: Final = 0.05


@dataclasses.dataclass(frozen=True)
class ShareSize:
    """A share size; a whole card asks for no capacity at all, so it gets the card's default."""

    name: str
    fraction: Fraction
    weight: int
    """Relative frequency in a drawn workload."""


SHARES: Final = (
    ShareSize("quarter", Fraction(1, 4), 5),
    ShareSize("half", Fraction(1, 2), 3),
    ShareSize("whole", Fraction(1), 2),
)


def claim_spec(
    names: DriverNames, share: ShareSize, card_memory: int, backend: Backend | None = None
) -> Object:
    """Return the claim spec asking for ``share`` of a card of ``card_memory`` bytes."""
    exactly: Object = {"deviceClassName": names.default_device_class}
    if share.fraction < 1:
        memory = int(card_memory * share.fraction) // _MIB
        cores = int(100 * share.fraction)
        exactly["capacity"] = {"requests": {"cores": str(cores), "memory": f"{memory}Mi"}}
    devices: Object = {"requests": [{"name": CONTAINER_CLAIM, "exactly": exactly}]}
    if backend is not None:
        parameters = {"apiVersion": names.config_api_version, "kind": names.config_kind,
                      "backend": str(backend)}  # fmt: skip
        devices["config"] = [
            {
                "requests": [CONTAINER_CLAIM],
                "opaque": {"driver": names.driver, "parameters": parameters},
            }
        ]
    return {"devices": devices}


def share_template(names: DriverNames, share: ShareSize, card_memory: int) -> Object:
    """Return the ResourceClaimTemplate of one share size, named after it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": share.name},
        "spec": {"spec": claim_spec(names, share, card_memory)},
    }


@dataclasses.dataclass(frozen=True)
class PlannedPod:
    """One pod: it names either a template (its own claim) or a shared ResourceClaim."""

    name: str
    template: str | None = None
    claim: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def manifest(self, gate: str | None) -> Object:
        """Return the Pod, carrying the scheduling gate ``gate`` (the webhook's) if given."""
        entry: Object = {"name": CONTAINER_CLAIM}
        entry_ref = {"name": CONTAINER_CLAIM}
        if self.template:
            entry["resourceClaimTemplateName"] = self.template
        else:
            entry["resourceClaimName"] = self.claim
        container = {"name": "main", "image": "cuda", "resources": {"claims": [entry_ref]}}
        spec: Object = {"resourceClaims": [entry], "containers": [container]}
        if gate:
            spec["schedulingGates"] = [{"name": gate}]
        metadata: Object = {"name": self.name}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@dataclasses.dataclass(frozen=True)
class Wave:
    """Pods to create together, and the shared claims they name (created first)."""

    pods: tuple[PlannedPod, ...]
    claims: tuple[Object, ...] = ()


def _draw(rng: random.Random) -> ShareSize:
    return rng.choices(SHARES, weights=[s.weight for s in SHARES])[0]


def plan_wave(
    names: DriverNames,
    rng: random.Random,
    prefix: str,
    pods: int,
    card_memory: int,
    *,
    shared_claims: int = 0,
    pods_per_claim: int = 1,
) -> Wave:
    """Draw ``pods`` pods: ``shared_claims`` named claims with ``pods_per_claim`` pods each.

    The other pods name the template of a random share size (:func:`share_template`; the
    caller creates the templates once).
    """
    if shared_claims * pods_per_claim > pods:
        raise ValueError(f"{shared_claims} claims x {pods_per_claim} pods exceed {pods} pods")
    claims = []
    planned = []
    for index in range(shared_claims):
        name = f"{prefix}-shared-{index}"
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                # Pods that use one claim together cannot share a HAMi-core region (each would
                # erase the other's accounting): the webhook and the plugin refuse that, so
                # such a claim only accounts, as its users would have to choose.
                "spec": claim_spec(names, _draw(rng), card_memory, Backend.NONE),
            }
        )
        planned += [PlannedPod(f"{name}-{n}", claim=name) for n in range(pods_per_claim)]
    for index in range(pods - len(planned)):
        planned.append(PlannedPod(f"{prefix}-{index}", template=_draw(rng).name))
    rng.shuffle(planned)
    return Wave(tuple(planned), tuple(claims))


def publish_slices(cluster: FakeCluster, names: DriverNames) -> None:
    """Publish every node's ResourceSlices as its kubelet plugin would, without running one."""
    cluster.apply(s for node in cluster.inventory.nodes for s in node_slices(names, node))


@dataclasses.dataclass
class PodTimes:
    """Monotonic times of one pod's milestones (``None``: not reached)."""

    created: float
    allocated: float | None = None
    """Every claim of the pod has ``status.allocation`` (observed through a watch)."""
    ungated: float | None = None
    bound: float | None = None
    running: float | None = None


class Tracker:
    """Watches one namespace's pods and claims and times each created pod's milestones."""

    def __init__(self, api: client.ApiClient, names: DriverNames, namespace: str) -> None:
        self._names, self.namespace = names, namespace
        core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        self._core, self._resource = core, resource
        self._applier = Applier(api)
        self._lock = threading.Lock()
        self.times: dict[str, PodTimes] = {}
        self._users: dict[str, set[str]] = {}
        """Claim name -> names of the pods that use it."""
        list_pods = functools.partial(core.list_namespaced_pod, namespace)
        list_claims = functools.partial(resource.list_namespaced_resource_claim, namespace)
        self._pods = Informer(list_pods, name="workload-pods", handler=self._on_pod)
        self._claims = Informer(list_claims, name="workload-claims", handler=self._on_claim)
        self._group = InformerGroup(self._pods, self._claims)

    def start(self, timeout: float = 30.0) -> None:
        """Start watching; return once both watches listed."""
        self._group.start()
        if not self._group.wait_synced(timeout):
            raise TimeoutError("the workload tracker's informers did not sync")

    def stop(self) -> None:
        """Stop watching."""
        self._group.stop()

    def create(self, wave: Wave, gate: str | None, interval: float = 0.0) -> None:
        """Create the wave's shared claims, then its pods, timing each.

        Pods go one after the other, or every ``interval`` seconds (a paced load below
        saturation; a late create is not made up for by a burst), as YAML as kubectl sends
        them. A pod's time starts when its create is sent: admission (the webhook's review)
        is part of its latency.
        """
        # As users create them (YAML): a claim stored as the Python client spaces it could not
        # take the driver's patches, on a real API server as on the fake.
        self._applier.create(wave.claims, self.namespace)
        next_at = time.monotonic()
        for pod in wave.pods:
            if interval > 0:
                time.sleep(max(next_at - time.monotonic(), 0.0))
                next_at = max(next_at + interval, time.monotonic())
            sent = time.monotonic()
            with self._lock:
                self.times[pod.name] = PodTimes(sent)
            self._applier.create([pod.manifest(gate)], self.namespace)

    def delete(self, wave: Wave) -> None:
        """Delete the wave's pods at once (grace period 0), then its shared claims."""
        delete_pod = self._core.delete_namespaced_pod
        delete_claim = self._resource.delete_namespaced_resource_claim
        for pod in wave.pods:
            with contextlib.suppress(NotFoundError):
                raw.call(delete_pod, pod.name, self.namespace, grace_period_seconds=0)
        for claim in wave.claims:
            with contextlib.suppress(NotFoundError):
                raw.call(delete_claim, claim["metadata"]["name"], self.namespace)
        with self._lock:
            for pod in wave.pods:
                self.times.pop(pod.name, None)

    def _reached(self, milestone: str, pods: Iterable[PlannedPod]) -> list[tuple[float, float]]:
        with self._lock:
            times = [self.times.get(p.name) for p in pods]
        return [
            (t.created, getattr(t, milestone))
            for t in times
            if t is not None and getattr(t, milestone) is not None
        ]

    def missing(self, milestone: str, pods: Iterable[PlannedPod]) -> list[str]:
        """Return the names of ``pods`` that have not reached ``milestone``."""
        with self._lock:
            times = [(p.name, self.times.get(p.name)) for p in pods]
        return [name for name, t in times if getattr(t, milestone, None) is None]

    def count(self, milestone: str, pods: Iterable[PlannedPod]) -> int:
        """Return how many of ``pods`` reached ``milestone`` (a :class:`PodTimes` field)."""
        return len(self._reached(milestone, pods))

    def wait(self, milestone: str, pods: Sequence[PlannedPod], timeout: float) -> bool:
        """Wait until every pod reached ``milestone``; return whether all did in time."""
        deadline = time.monotonic() + timeout
        while self.count(milestone, pods) < len(pods):
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_SECONDS)
        return True

    def latencies(self, milestone: str, pods: Iterable[PlannedPod]) -> list[float]:
        """Return seconds from creation to ``milestone`` of each pod that reached it."""
        return [max(0.0, end - created) for created, end in self._reached(milestone, pods)]

    def span(self, milestone: str, pods: Iterable[PlannedPod]) -> float:
        """Return seconds from the first creation to the last pod reaching ``milestone``."""
        reached = self._reached(milestone, pods)
        return max(e for _, e in reached) - min(c for c, _ in reached) if reached else 0.0

    # -- watch events, on the informers' threads -------------------------------------------

    def _on_pod(self, kind: EventType, pod: Object) -> None:
        name = pod["metadata"]["name"]
        now = time.monotonic()
        claims = [c for c in objects.pod_claim_names(pod).values() if c]
        with self._lock:
            for claim in claims:
                users = self._users.setdefault(claim, set())
                if kind == "DELETED":
                    users.discard(name)
                else:
                    users.add(name)
                if not users:  # the index must not grow with every wave a load run makes
                    del self._users[claim]
            if kind == "DELETED":
                return
            times = self.times.get(name)
            if times is None:
                return
            if times.ungated is None and not objects.has_scheduling_gate(
                pod, self._names.scheduling_gate
            ):
                times.ungated = now
            if times.bound is None and pod["spec"].get("nodeName"):
                times.bound = now
            if times.running is None and objects.status(pod).get("phase") == "Running":
                times.running = now
        self._check_allocated(name, pod, now)

    def _on_claim(self, kind: EventType, claim: Object) -> None:
        if kind == "DELETED" or not objects.status(claim).get("allocation"):
            return
        now = time.monotonic()
        with self._lock:
            users = list(self._users.get(claim["metadata"]["name"], ()))
        for name in users:
            pod = self._pods.get(self.namespace, name)
            if pod is not None:
                self._check_allocated(name, pod, now)

    def _check_allocated(self, name: str, pod: Object, now: float) -> None:
        for claim in objects.pod_claim_names(pod).values():
            cached = self._claims.get(self.namespace, claim) if claim else None
            if not (cached and objects.status(cached).get("allocation")):
                return
        with self._lock:
            times = self.times.get(name)
            if times is not None and times.allocated is None:
                times.allocated = now


def card_memory(cluster: FakeCluster) -> int:
    """Return the shareable memory of the cluster's smallest card, so every share fits any card."""
    return min(c.shareable_memory_bytes for n in cluster.inventory.nodes for c in n.cards)


def cpu_seconds(pid: int) -> float:
    """Return the user and system CPU time a process used so far (from ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_leading_controller(
    cluster: FakeCluster,
    names: DriverNames,
    metrics_port: int = -1,
    timeout: float = 60.0,
    *,
    elect: bool = False,
) -> ComponentProcess:
    """Start ``gpushare-dra controller``; return once it leads.

    ``elect``: campaign for the Lease (in ``default``) as the chart deploys it; else the
    controller runs without leader election.
    """
    election = ["--leader-election-namespace", "default"] if elect else ["--no-leader-elect"]
    controller = start_controller(
        cluster, names=names, args=[*election, "--metrics-port", str(metrics_port)]
    )
    controller.wait_ready(timeout)
    deadline = time.monotonic() + timeout
    # Leading comes after the informers synced: only then does it allocate.
    while '"controller.leading"' not in controller.output():
        if controller.process.poll() is not None or time.monotonic() > deadline:
            controller.terminate()
            raise TimeoutError(f"the controller did not lead:\n{controller.output()}")
        time.sleep(_POLL_SECONDS)
    return controller
