"""Whether a node has room for a pod's own needs, as kube-scheduler's filters judge it.

The controller pins a pod to a node through its claims' ``nodeSelector``; if the pod's CPU,
memory, ephemeral storage, extended resources, pod count or host ports do not fit there,
kube-scheduler refuses the node and the pod never runs. So the controller checks what
kube-scheduler's ``NodeResourcesFit`` and ``NodePorts`` plugins check, against the pods bound
to the node, before it chooses one. Inter-pod affinity and topology spread are not judged.

:func:`demand` and :func:`unfit` are pure; :class:`NodeUsage` is the index the pod watch feeds.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from dra_driver.k8s.podaffinity import required_terms
from dra_driver.k8s.quantity import QuantityError, parse_quantity

Port = tuple[str, str, int]
"""``(protocol, hostIP, hostPort)``; an empty or ``0.0.0.0`` address means every address."""

_PODS = "pods"
_ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - a port's "every address", not a socket we bind


@dataclasses.dataclass(frozen=True)
class Demand:
    """What a pod needs of a node: resource requests and host ports."""

    resources: Mapping[str, Fraction]
    ports: frozenset[Port]


def demand(pod: ObjectView) -> Demand:
    """Return a pod's requests as kube-scheduler sums them, and its host ports.

    Containers add up; a sidecar (an init container with ``restartPolicy: Always``) runs
    beside them and adds too; a plain init container runs alone (beside the sidecars started
    before it), so only the largest such moment counts. Pod overhead comes on top, and
    pod-level ``resources.requests`` replace the containers' sum for what they name.
    """
    spec = objects.spec(pod)
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        _add(total, _requests(container))
    sidecars: dict[str, Fraction] = {}
    peak: dict[str, Fraction] = {}
    for container in spec.get("initContainers") or []:
        own = _requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            moment = dict(sidecars)
        else:
            moment = _add(dict(own), sidecars)
        peak = {k: max(peak.get(k, Fraction(0)), v) for k, v in {**peak, **moment}.items()}
    total = {k: max(total.get(k, Fraction(0)), peak.get(k, Fraction(0))) for k in {*total, *peak}}
    _add(total, _quantities(spec.get("overhead")))
    total.update(_quantities(_pod_requests(spec)))
    ports = {
        (str(p.get("protocol") or "TCP"), str(p.get("hostIP") or _ANY_ADDRESS), int(p["hostPort"]))
        for kind in ("initContainers", "containers")
        for container in spec.get(kind) or []
        for p in container.get("ports") or []
        if p.get("hostPort")
    }
    return Demand({k: v for k, v in total.items() if v}, frozenset(ports))


def unfit(
    need: Demand, node: ObjectView, used: Mapping[str, Fraction], pods: int, ports: Iterable[Port]
) -> str | None:
    """Return why a pod needing ``need`` does not fit ``node`` beside what is used, or ``None``.

    ``used`` are the requests of the node's pods, ``pods`` their number and ``ports`` their
    host ports. A node that reports no ``status.allocatable`` is not judged.
    """
    allocatable = objects.status(node).get("allocatable")
    if not isinstance(allocatable, Mapping):
        return None
    free = _quantities(allocatable)
    if _PODS in free and pods + 1 > free[_PODS]:
        return "Too many pods"
    short = sorted(
        name
        for name, amount in need.resources.items()
        if used.get(name, Fraction(0)) + amount > free.get(name, Fraction(0))
    )
    if short:
        return ", ".join(f"Insufficient {name}" for name in short)
    taken = list(ports)
    if any(_conflict(mine, theirs) for mine in need.ports for theirs in taken):
        return "node(s) didn't have free ports for the requested pod ports"
    return None


class NodeUsage:
    """Requests, pod count and host ports of the unfinished pods bound to each node.

    Fed by every pod event (any thread); read by the allocating thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, Demand]] = {}
        self._used: dict[str, dict[str, Fraction]] = {}
        self._ports: dict[str, Counter[Port]] = {}
        self._count: Counter[str] = Counter()
        self._assumed: dict[str, str] = {}
        self._holders: dict[str, dict[str, Any]] = {}

    def assume(self, pod: dict[str, Any], node: str) -> None:
        """Count a pod on the node it is pinned to, before the scheduler binds it there."""
        with self._lock:
            self._assumed[objects.uid(pod)] = node
        self.update(pod)

    def update(self, pod: dict[str, Any], *, deleted: bool = False) -> None:
        """Count the pod as it is now: bound (or assumed) and unfinished, or not at all."""
        uid, bound = objects.uid(pod), str(objects.spec(pod).get("nodeName") or "")
        ended = deleted or objects.is_terminal(pod)
        with self._lock:
            assumed = self._assumed.get(uid, "")
            if bound or ended:
                self._assumed.pop(uid, None)
            node = "" if ended else bound or assumed
            counts = bool(node)
            if bound and not ended and required_terms(pod, "podAntiAffinity"):
                self._holders[uid] = pod
            else:
                self._holders.pop(uid, None)
            old = self._pods.pop(uid, None)
            if old is not None:
                self._apply(*old, sign=-1)
            if counts:
                entry = (node, demand(pod))
                self._pods[uid] = entry
                self._apply(*entry, sign=1)

    def anti_affinity_holders(self) -> list[dict[str, Any]]:
        """Return the bound, unfinished pods with required anti-affinity terms."""
        with self._lock:
            return list(self._holders.values())

    def unfit(self, need: Demand, node: ObjectView) -> str | None:
        """Return why ``need`` does not fit beside this node's pods, or ``None``."""
        name = str(objects.metadata(node).get("name") or "")
        with self._lock:
            used = dict(self._used.get(name, {}))
            ports = list(self._ports.get(name, {}))
            pods = self._count[name]
        return unfit(need, node, used, pods, ports)

    def _apply(self, node: str, need: Demand, *, sign: int) -> None:
        used = _add(self._used.get(node, {}), {k: sign * v for k, v in need.resources.items()})
        ports = self._ports.get(node, Counter())
        ports.update(dict.fromkeys(need.ports, sign))
        self._count[node] += sign
        # Drop what reached zero, so a freed port is free and nothing grows without bound.
        self._used[node] = {k: v for k, v in used.items() if v}
        self._ports[node] = +ports
        if not self._count[node]:
            del self._count[node], self._used[node], self._ports[node]


def _conflict(mine: Port, theirs: Port) -> bool:
    (protocol, address, port), (other_protocol, other_address, other_port) = mine, theirs
    if protocol != other_protocol or port != other_port:
        return False
    return _ANY_ADDRESS in (address, other_address) or address == other_address


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> dict[str, Fraction]:
    for name, amount in more.items():
        into[name] = into.get(name, Fraction(0)) + amount
    return into


def _requests(container: ObjectView) -> dict[str, Fraction]:
    return _quantities((container.get("resources") or {}).get("requests"))


def _pod_requests(spec: ObjectView) -> ObjectView | None:
    resources = spec.get("resources")
    return resources.get("requests") if isinstance(resources, Mapping) else None


def _quantities(values: object) -> dict[str, Fraction]:
    """Parse a resource list; an entry that is not a quantity counts as absent."""
    parsed: dict[str, Fraction] = {}
    for name, text in values.items() if isinstance(values, Mapping) else ():
        try:
            parsed[str(name)] = parse_quantity(str(text))
        except QuantityError:
            continue
    return parsed
