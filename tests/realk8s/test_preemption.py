"""Preemption on a real API server: an online pod makes room by evicting one offline pod.

node-1 has one T4 (100 cores, 15Gi). Two offline 40-core/6Gi shares run there; an online pod
asks 60 cores and 8Gi, which fits only once one of them is gone. Every object comes from
deploy/examples/preemption.yaml, applied with kubectl as a user would; the real
kube-controller-manager computes the PodDisruptionBudget's status, and the real Eviction API
enforces it.
"""

from __future__ import annotations

import time

from dra_driver.api import DEFAULT_DRIVER_NAME
from realk8s.kit import Cluster, example, pinned, step

ANNOTATION = f"{DEFAULT_DRIVER_NAME}/nomination"


def documents(name: str) -> list[dict]:
    """Return the example's documents of step ``name``, every pod pinned to node-1."""
    return pinned(step(example("preemption"), name), "node-1")


def phases(cluster: Cluster, namespace: str) -> dict[str, str]:
    """Map each pod of the namespace to its phase, "Terminating" while it is being deleted."""
    return {
        pod["metadata"]["name"]: (
            "Terminating"
            if pod["metadata"].get("deletionTimestamp")
            else (pod.get("status") or {}).get("phase", "")
        )
        for pod in cluster.pods(namespace)
    }


def batch_running(cluster: Cluster, namespace: str) -> bool:
    """Whether both batch pods run."""
    found = phases(cluster, namespace)
    return found.get("batch-1") == found.get("batch-2") == "Running"


def serving(cluster: Cluster, namespace: str) -> str | None:
    """Return the serving pod's name, once there is one."""
    return next((n for n in phases(cluster, namespace) if n.startswith("serving-")), None)


def test_an_online_pod_evicts_exactly_one_offline_pod_and_runs(
    cluster: Cluster, namespace: str
) -> None:
    """Two offline 40/6Gi shares on one card; online 60/8Gi runs within 30 s, one evicted."""
    assert cluster.apply(documents("batch"), namespace).returncode == 0
    cluster.wait(lambda: batch_running(cluster, namespace), "both batch pods", namespace)
    started = time.monotonic()
    assert cluster.apply(documents("serving"), namespace).returncode == 0
    name = cluster.wait(lambda: serving(cluster, namespace), "the serving pod", namespace)
    cluster.wait(
        lambda: phases(cluster, namespace).get(name) == "Running", "serving to run", namespace
    )
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"the online pod took {elapsed:.1f} s"
    left = phases(cluster, namespace)
    batch = {n: p for n, p in left.items() if n.startswith("batch-")}
    assert list(batch.values()).count("Running") == 1, left
    (kept,) = [n for n, p in batch.items() if p == "Running"]
    evicted = "batch-2" if kept == "batch-1" else "batch-1"
    assert evicted not in left or left[evicted] == "Terminating"
    messages = cluster.events(namespace, name)
    assert any(f"evicting offline pod(s) {namespace}/{evicted} from node-1" in m for m in messages)
    claim = next(c for c in cluster.claims(namespace) if c["metadata"]["name"].startswith(name))
    assert ANNOTATION not in (claim["metadata"].get("annotations") or {})
    time.sleep(2)
    assert phases(cluster, namespace).get(kept) == "Running"


def test_a_budget_that_allows_no_disruption_evicts_nothing(
    cluster: Cluster, namespace: str
) -> None:
    """With a PDB at minAvailable 2 over the batch pods, nothing goes; the reason names it."""
    assert cluster.apply(documents("budget"), namespace).returncode == 0
    assert cluster.apply(documents("batch"), namespace).returncode == 0
    cluster.wait(lambda: batch_running(cluster, namespace), "both batch pods", namespace)
    cluster.wait(
        lambda: (
            cluster.json("pdb", "batch", "-n", namespace).get("status", {}).get("currentHealthy")
            == 2
        ),
        "the disruption controller to count the batch pods",
        namespace,
    )
    assert cluster.apply(documents("serving"), namespace).returncode == 0
    name = cluster.wait(lambda: serving(cluster, namespace), "the serving pod", namespace)

    def blocked() -> str | None:
        found = [m for m in cluster.events(namespace, name) if "PodDisruptionBudget" in m]
        return found[-1] if found else None

    message = cluster.wait(blocked, "the serving pod to wait on the budget", namespace)
    assert f"PodDisruptionBudget {namespace}/batch" in message
    time.sleep(3)
    assert batch_running(cluster, namespace)
    assert phases(cluster, namespace)[name] == "Pending"
