"""What the simulated cluster shows: per pod where it landed and what its containers are told.

Everything comes from where a cluster operator would look: the API (pods, claims and their
allocations, the ResourceSlices the kubelet plugins published, events, the GpuShareQuotas
and the status the controller writes on them) and, for the environment, the container edits
the emulated kubelet resolved from the plugin's CDI specs, which is what a container runtime
would hand the container.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Final

from kubernetes import client

from dra_driver.api import ConfigError, DriverNames
from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import NotFoundError
from dra_driver.k8s.objects import Object
from dra_driver.structured.config import share_config
from dra_driver.structured.configshares import counted_claims, slice_capacities
from dra_driver.usage.model import CardUse, PublishedCard, card_uses, published_cards, quantity
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.simulate.cudawork import TaskFact

# What an interception layer reads: HAMi-core and MPS (CUDA_*, GPU_*) and the generic GPUSHARE_*.
INTERCEPTION_PREFIXES: Final = ("CUDA_", "GPU_", "GPUSHARE_")
_FINISHED: Final = ("Running", "Succeeded", "Failed")


@dataclasses.dataclass(frozen=True)
class ShareFact:
    """One request of one of the pod's claims: its card once allocated, else what it asks."""

    claim: str
    request: str
    card: PublishedCard | None
    cores: Fraction | None
    """Consumed (allocated) or requested cores; ``None``: the whole card (nothing asked)."""
    memory: Fraction | None
    isolation: str | None
    priority: str | None
    claim_uid: str


@dataclasses.dataclass(frozen=True)
class PodFact:
    """One pod as the report shows it."""

    namespace: str
    name: str
    owner: str
    phase: str
    node: str | None
    reason: str | None
    """Why it does not run (the newest warning event, or the scheduler's condition)."""
    shares: tuple[ShareFact, ...]
    env: Mapping[str, Mapping[str, str]]
    """Container name -> the interception variables it would get."""
    event: str | None = None
    """The reason of the newest warning event about it, while it does not run."""

    def merged_env(self) -> dict[str, str]:
        """Return the variables of all containers together."""
        merged: dict[str, str] = {}
        for variables in self.env.values():
            merged.update(variables)
        return merged


@dataclasses.dataclass(frozen=True)
class QuotaFact:
    """A GpuShareQuota as ``kubectl get gpusharequota`` shows it: its hard, and its status."""

    namespace: str
    name: str
    hard: Mapping[str, str]
    used: Mapping[str, str]
    """``status.used`` as the controller wrote it; empty until it did."""
    exceeded: str | None
    """The status of its ``Exceeded`` condition (``"True"``/``"False"``); ``None``: none yet."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The pods of interest, every card and the simulated CUDA work, at one moment."""

    pods: tuple[PodFact, ...]
    cards: tuple[CardUse, ...]
    tasks: tuple[TaskFact, ...] = ()
    quotas: tuple[QuotaFact, ...] = ()
    """The GpuShareQuotas of the namespaces of interest."""

    def pod(self, name: str) -> PodFact | None:
        """Return the pod named ``name``, if present."""
        return next((p for p in self.pods if p.name == name), None)

    def quota(self, name: str) -> QuotaFact | None:
        """Return the quota named ``name``, if present."""
        return next((q for q in self.quotas if q.name == name), None)

    def task(self, pod: str) -> TaskFact | None:
        """Return the CUDA work of the pod named ``pod``, if it has any."""
        return next((t for t in self.tasks if t.pod == pod), None)


@dataclasses.dataclass(frozen=True)
class _Seen:
    """What one snapshot read from the API, besides the pods."""

    claims: Mapping[tuple[str, str], Object]
    classes: Mapping[str, Object]
    cards: Mapping[tuple[str, str], PublishedCard]
    events: list[Object]


class Observer:
    """Takes :class:`Snapshot` s of a running simulated cluster."""

    def __init__(self, cluster: FakeCluster, names: DriverNames) -> None:
        self._cluster, self._names = cluster, names
        self._core = client.CoreV1Api(cluster.api)
        self._resource = client.ResourceV1Api(cluster.api)
        self._custom = client.CustomObjectsApi(cluster.api)

    def snapshot(
        self,
        namespaces: Iterable[str],
        owners: Mapping[tuple[str, str], str],
        quota_namespaces: Iterable[str] = (),
    ) -> Snapshot:
        """Return the pods of ``namespaces`` (``owners`` names what made each) and all cards.

        GpuShareQuotas are read only in ``quota_namespaces`` (where one was applied), so that
        the polling of scenarios without one costs no more requests.
        """
        slices = raw.call(self._resource.list_resource_slice)["items"]
        cards = published_cards(slices, self._names.driver)
        stored = raw.call(self._resource.list_resource_claim_for_all_namespaces)["items"]
        claims = counted_claims(stored, self._names, slice_capacities(slices, self._names.driver))
        classes = {
            c["metadata"]["name"]: c for c in raw.call(self._resource.list_device_class)["items"]
        }
        by_name = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        pods, quotas = [], []
        for namespace in sorted(set(quota_namespaces)):
            quotas += self._quotas(namespace)
        for namespace in sorted(set(namespaces)):
            seen = _Seen(
                by_name,
                classes,
                cards,
                raw.call(self._core.list_namespaced_event, namespace)["items"],
            )
            for pod in raw.call(self._core.list_namespaced_pod, namespace)["items"]:
                key = (namespace, pod["metadata"]["name"])
                pods.append(self._pod(pod, owners.get(key, f"Pod/{key[1]}"), seen))
        pods.sort(key=lambda p: (p.namespace, _creation_order(owners, p)))
        uses = tuple(card_uses(self._names, slices, stored))
        return Snapshot(tuple(pods), uses, quotas=tuple(quotas))

    def _quotas(self, namespace: str) -> list[QuotaFact]:
        """Return the namespace's GpuShareQuotas; none where the API server serves no such kind."""
        group, version = self._names.quota_group_version
        try:
            listed = raw.call(
                self._custom.list_namespaced_custom_object,
                group,
                version,
                namespace,
                self._names.quota_plural,
            )
        except NotFoundError:
            return []
        found = []
        for quota in listed.get("items") or []:
            status = objects.status(quota)
            conditions = status.get("conditions") or []
            exceeded = next(
                (c.get("status") for c in conditions if c.get("type") == "Exceeded"), None
            )
            found.append(
                QuotaFact(
                    namespace,
                    objects.name(quota),
                    {str(k): str(v) for k, v in (objects.spec(quota).get("hard") or {}).items()},
                    {str(k): str(v) for k, v in (status.get("used") or {}).items()},
                    None if exceeded is None else str(exceeded),
                )
            )
        return sorted(found, key=lambda q: q.name)

    def _pod(self, pod: Object, owner: str, seen: _Seen) -> PodFact:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        status = objects.status(pod)
        phase = str(status.get("phase") or "Pending")
        node = pod["spec"].get("nodeName")
        shares = []
        for claim_name in objects.pod_claim_names(pod).values():
            claim = seen.claims.get((namespace, claim_name or ""))
            if claim is not None:
                shares.extend(self._shares(claim, seen.classes, seen.cards))
        env: dict[str, dict[str, str]] = {}
        kubelet = self._cluster.kubelets.get(node or "")
        if kubelet is not None and phase == "Running":
            for container in pod["spec"].get("containers") or []:
                edits = kubelet.containers.get((namespace, name, container["name"]))
                if edits is not None:
                    env[container["name"]] = {
                        k: v for k, v in edits.env.items() if k.startswith(INTERCEPTION_PREFIXES)
                    }
        reason, event = (None, None) if phase in _FINISHED else _reason(pod, seen.events)
        return PodFact(namespace, name, owner, phase, node, reason, tuple(shares), env, event)

    def _shares(
        self,
        claim: Object,
        classes: Mapping[str, Object],
        cards: Mapping[tuple[str, str], PublishedCard],
    ) -> list[ShareFact]:
        key = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        allocation = objects.status(claim).get("allocation")
        requests = claim["spec"]["devices"].get("requests") or []
        if allocation:
            entries = (allocation.get("devices") or {}).get("config") or []
            shares = []
            for result in allocation["devices"]["results"]:
                card = cards.get((result["pool"], result["device"]))
                consumed = result.get("consumedCapacity") or {}
                # Allocated without a share (a whole-only card): the claim holds all of it.
                whole = card is not None and not result.get("shareID")
                shares.append(
                    ShareFact(
                        key,
                        result["request"],
                        card,
                        card.cores if whole and card else quantity(consumed.get("cores")),
                        card.memory if whole and card else quantity(consumed.get("memory")),
                        *self._config(entries, result["request"], result["driver"]),
                        objects.uid(claim),
                    )
                )
            return shares
        shares = []
        for request in requests:
            exactly = request.get("exactly") or {}
            device_class = classes.get(exactly.get("deviceClassName", "")) or {}
            entries = [
                {"source": "FromClass", **entry}
                for entry in objects.spec(device_class).get("config") or []
            ] + [
                {"source": "FromClaim", **entry}
                for entry in claim["spec"]["devices"].get("config") or []
            ]
            wanted = (exactly.get("capacity") or {}).get("requests") or {}
            shares.append(
                ShareFact(
                    key,
                    request["name"],
                    None,
                    quantity(wanted.get("cores")),
                    quantity(wanted.get("memory")),
                    *self._config(entries, request["name"], self._names.driver),
                    objects.uid(claim),
                )
            )
        return shares

    def _config(
        self, entries: list[Object], request: str, driver: str
    ) -> tuple[str | None, str | None]:
        if driver != self._names.driver:
            return None, None
        try:
            config = share_config(entries, self._names, request, path="config").effective()
        except ConfigError:
            return "invalid", "invalid"
        return str(config.isolation), str(config.priority)


def _creation_order(owners: Mapping[tuple[str, str], str], pod: PodFact) -> int:
    order = list(owners)
    key = (pod.namespace, pod.name)
    return order.index(key) if key in order else len(order)


def _reason(pod: Object, events: list[Object]) -> tuple[str | None, str | None]:
    """Return why the pod does not run, and the reason of the newest warning about it."""
    uid = objects.uid(pod)
    warnings = [
        e
        for e in events
        if e.get("type") == "Warning" and (e.get("involvedObject") or {}).get("uid") == uid
    ]
    if warnings:
        newest = max(
            warnings,
            key=lambda e: (
                str(e.get("lastTimestamp") or ""),
                int(e["metadata"].get("resourceVersion") or 0),
            ),
        )
        return str(newest.get("message") or newest.get("reason")), str(newest.get("reason"))
    for condition in objects.status(pod).get("conditions") or []:
        unschedulable = (
            condition.get("type") == "PodScheduled" and condition.get("status") == "False"
        )
        # A gated pod is the controller's to explain; kube-scheduler only says it is gated.
        if unschedulable and condition.get("reason") != "SchedulingGated":
            return str(condition.get("message") or condition.get("reason")), None
    return None, None
