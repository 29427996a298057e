"""Preemption in a plan: which offline pods an online pod that fits nowhere would have evicted.

The controller's rules (docs/preemption.md), asked of the engine as the controller asks them
(:mod:`dra_driver.engine.preempt`): an online pod whose claims fit on no card, and that would
fit once some offline, preemptible pods running on one node were gone, evicts as few of them
as it takes, never against a PodDisruptionBudget (:mod:`dra_driver.plan.budgets`).

A plan evicts nothing anywhere; in its own picture of the cluster, though, the preempting pod
is placed where the evictions make room, and the victims are gone: their claims are released
and later pods see the room. A victim that is a pod of the file is reported ``evicted``
(its Job or Deployment would re-create it, to wait for room like any pod; the plan does not
place it again, nor a bare Pod, which is not re-created). A pod that runs in the cluster
(``plan --kubeconfig``) is named among the preempting pod's victims only.

The pods that may be victims are the ones running in the plan's picture: the cluster's pods
on nodes, and each pod of the file once placed, with its claims reserved for it, its UID
derived from its name and its creation time its position in the file (later pods are
younger, and go first among equals).
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from dra_driver.engine import Policy, Snapshot
from dra_driver.engine.preempt import Blocked, Preemption, preempt, victims, wants_preemption
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.scheduling import node_unfit_reason
from dra_driver.k8s.timestamps import rfc3339
from dra_driver.plan.budgets import PlanBudgets
from dra_driver.plan.workload import PlannedPod

# Fixed, so the same file always gives its pods the same UIDs (victims are named by them).
_POD_UID_NAMESPACE: Final = uuid.UUID("8e0f3b52-6a4d-4c1e-b7a9-3d5c2e1f0a64")


def pod_reference(pod: Object) -> Object:
    """Return the ``reservedFor`` entry of a claim reserved for ``pod``."""
    return {"resource": "pods", "name": objects.name(pod), "uid": objects.uid(pod)}


@dataclasses.dataclass(frozen=True)
class Eviction:
    """The evictions that let a pod in: the victims (``namespace/name``) and their claims."""

    node: str
    victims: tuple[str, ...]
    claims: tuple[str, ...]
    """UIDs of the victims' claims: released, their room free for the preempting pod."""

    def reason(self) -> str:
        """Say what the preempting pod does: ``would evict default/batch-1 on node-1``."""
        return f"would evict {', '.join(self.victims)} on {self.node}"

    def after(self) -> str:
        """Say what happened first: ``after evicting default/batch-1 on node-1``."""
        return f"after evicting {', '.join(self.victims)} on {self.node}"


class PlanPreemptor:
    """The pods running in one policy's picture, and the evictions that picture allows."""

    def __init__(
        self,
        cluster_pods: Iterable[Object],
        budgets: PlanBudgets,
        file_pods: Sequence[PlannedPod],
        *,
        enabled: bool = True,
    ) -> None:
        self.running: dict[tuple[str, str], Object] = {
            (objects.namespace(pod), objects.name(pod)): pod
            for pod in cluster_pods
            if objects.spec(pod).get("nodeName")
        }
        """``(namespace, name)`` -> each pod that runs now: the cluster's, the plan's placed."""
        self.budgets = budgets
        self.enabled = enabled
        """``False``: as a controller run with ``--preemption=false``, no pod evicts another."""
        self.evicted: dict[str, str] = {}
        """Each pod of the file the plan evicted (``namespace/name``) -> what it says of it."""
        self._order = {
            (pod.namespace, pod.name): index for index, pod in enumerate(file_pods, start=1)
        }
        self._owners = {(pod.namespace, pod.name): pod.owner for pod in file_pods}

    def running_pod(self, planned: PlannedPod, node: str) -> Object:
        """Return the pod as it runs once placed on ``node``: bound, with a UID and its claims.

        It is counted as running from now on.
        """
        key = (planned.namespace, planned.name)
        metadata = {
            **planned.pod["metadata"],
            "uid": str(uuid.uuid5(_POD_UID_NAMESPACE, "/".join(key))),
            "creationTimestamp": rfc3339(
                datetime.datetime.fromtimestamp(self._order.get(key, 0), datetime.UTC)
            ),
        }
        generated = [
            {"name": c.entry, "resourceClaimName": objects.name(c.claim)}
            for c in planned.claims
            if not c.shared
        ]
        pod = {
            **planned.pod,
            "metadata": metadata,
            "spec": {**planned.pod["spec"], "nodeName": node},
            "status": {"phase": "Running", "resourceClaimStatuses": generated},
        }
        self.running[key] = pod
        return pod

    def attempt(
        self,
        snapshot: Snapshot,
        pod: Object,
        claims: Sequence[Object],
        policy: Policy,
        *,
        pinned: Sequence[Object],
        share_id: Callable[[], str],
    ) -> Preemption | Blocked | None:
        """Ask the controller's question for ``pod``, whose ``claims`` fit nowhere now."""
        if not self.enabled or not wants_preemption(snapshot, pod, claims):
            return None
        found = victims(snapshot, pod, lambda ns, name: self.running.get((ns, name)))
        # Nodes the pod may not run on could never take it (as the engine checks): skipped
        # here, where it is cheap, instead of once per set of victims.
        candidates = {
            node: listed
            for node, listed in found.items()
            if node in snapshot.nodes and node_unfit_reason(pod, snapshot.nodes[node]) is None
        }
        if not candidates:
            return None
        return preempt(
            snapshot,
            pod,
            claims,
            policy,
            candidates=candidates,
            budgets=self.budgets.now(self.running.values()),
            pinned=pinned,
            share_id=share_id,
        )

    def evict(self, found: Preemption, by: str) -> Eviction:
        """Take ``found``'s victims out of the picture; ``by`` names the preempting pod.

        The caller releases the returned claims.
        """
        for victim in found.victims:
            key = (victim.pod.namespace, victim.pod.name)
            self.running.pop(key, None)
            owner = self._owners.get(key)
            if owner is not None:
                again = (
                    "a bare Pod is not re-created"
                    if owner.startswith("Pod/")
                    else f"its {owner} would re-create it, to wait for room"
                )
                self.evicted[victim.pod.key] = (
                    f"evicted from {found.node} to make room for online pod {by}; {again}"
                )
        self.budgets.evicted(found.victims)
        return Eviction(
            found.node,
            tuple(victim.pod.key for victim in found.victims),
            tuple(uid for victim in found.victims for uid in victim.claims),
        )
