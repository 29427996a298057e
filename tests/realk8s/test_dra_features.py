"""Kubernetes DRA features the controller must honour as kube-scheduler does, on a real plane.

The controller allocates the pods it gates itself, so what kube-scheduler respects (other
scheduling gates, device taints, admin access …) it must respect too.
"""

from __future__ import annotations

import time

from realk8s.kit import Cluster, example, pinned

QUEUE_GATE = "example.com/queue"


def test_a_pod_held_by_a_queues_gate_gets_no_allocation_until_admitted(
    cluster: Cluster, namespace: str
) -> None:
    """With a foreign gate first the claim stays unallocated; once removed, the pod runs."""
    documents = pinned(example("sharing"), "node-1")
    template = documents[0]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    pod_spec = deployment["spec"]["template"]["spec"]
    pod_spec["schedulingGates"] = [{"name": QUEUE_GATE}]
    assert cluster.apply([template, deployment], namespace).returncode == 0
    prefix = deployment["metadata"]["name"]

    def told() -> bool:
        pod = cluster.pod(namespace, prefix)
        events = cluster.events(namespace, pod["metadata"]["name"]) if pod else []
        return f"waiting for the pod's other scheduling gates: {QUEUE_GATE}" in events

    cluster.wait(told, "the controller's WaitingForSchedulingGates event", namespace)
    time.sleep(2)  # the controller had its chance: it must not have taken it
    assert [c for c in cluster.claims(namespace) if (c.get("status") or {}).get("allocation")] == []
    pod = cluster.pod(namespace, prefix)
    assert pod is not None
    gates = [g["name"] for g in pod["spec"]["schedulingGates"]]
    assert gates == [QUEUE_GATE, "gpushare.dra.dev/allocation"]
    name = pod["metadata"]["name"]
    admit = '[{"op":"remove","path":"/spec/schedulingGates/0"}]'
    cluster.kubectl("patch", "pod", name, "-n", namespace, "--type=json", "-p", admit)
    cluster.wait(lambda: cluster.running(namespace, prefix), f"{name} to run", namespace)
