"""The six acceptance scenarios on a real control plane with real kubelets.

Each example manifest is applied with kubectl, as a user would, pinned to a node as the
simulator pins it. Containers' environments come from the CDI devices the real kubelet handed
the runtime. What needs CUDA work in the pods (the node monitor's run-time decisions) is the
simulator's and the GPU suite's part; here the API path, allocation and prepare are real.
"""

from __future__ import annotations

import time

from realk8s.kit import Cluster, Object, example, pinned, step, unlabelled, wait_for


def _limits(memory_mib: int, cores: int) -> dict[str, str]:
    return {"CUDA_DEVICE_MEMORY_LIMIT_0": f"{memory_mib}m", "CUDA_DEVICE_SM_LIMIT_0": str(cores)}


def _card(cluster: Cluster, namespace: str, prefix: str, container: str) -> str:
    pod = cluster.wait(lambda: cluster.running(namespace, prefix), f"{prefix} to run", namespace)
    return cluster.env(pod, container)["GPUSHARE_DEVICE_UUIDS"]


def test_whole_card_then_the_second_waits_with_a_reason_and_runs_when_the_first_ends(
    cluster: Cluster, namespace: str
) -> None:
    """No request is a whole card; the other job waits, gated, with the reason; it runs after."""
    result = cluster.apply(pinned(example("whole-card"), "node-1"), namespace)
    assert result.returncode == 0, result.stderr

    def one_running() -> tuple[Object, str] | None:
        running = [cluster.running(namespace, job) for job in ("train-1", "train-2")]
        if running.count(None) != 1:
            return None
        first = next(p for p in running if p is not None)
        waiting = "train-2" if first["metadata"]["name"].startswith("train-1") else "train-1"
        return first, waiting

    # Both jobs are created together: which one the controller takes first is not fixed.
    first, waiting = cluster.wait(one_running, "one job to run", namespace)
    assert cluster.env(first, "trainer").items() >= _limits(15360, 100).items()

    def reason() -> bool:
        pod = cluster.pod(namespace, waiting)
        reasons = " ".join(cluster.events(namespace, pod["metadata"]["name"])) if pod else ""
        return "no card with 100 cores, 15Gi memory free" in reasons

    wait_for(reason, f"{waiting}'s FailedAllocation event")
    second = cluster.pod(namespace, waiting)
    assert second is not None
    assert [g["name"] for g in second["spec"]["schedulingGates"]] == ["gpushare.dra.dev/allocation"]
    job = first["metadata"]["name"].rsplit("-", 1)[0]
    cluster.kubectl("delete", "-n", namespace, "job", job, "--wait=false")
    running = cluster.wait(
        lambda: cluster.running(namespace, waiting), f"{waiting} to run", namespace, 60
    )
    assert cluster.env(running, "trainer").items() >= _limits(15360, 100).items()


def test_sharing_two_services_on_one_card_each_told_its_share(
    cluster: Cluster, namespace: str
) -> None:
    """5Gi/40 and 5Gi/30 run at once on node-1's one card, each with its own limits."""
    assert cluster.apply(pinned(example("sharing"), "node-1"), namespace).returncode == 0
    a = cluster.wait(lambda: cluster.running(namespace, "infer-a"), "infer-a to run", namespace)
    b = cluster.wait(lambda: cluster.running(namespace, "infer-b"), "infer-b to run", namespace)
    env_a, env_b = cluster.env(a, "server"), cluster.env(b, "server")
    assert env_a.items() >= _limits(5120, 40).items()
    assert env_b.items() >= _limits(5120, 30).items()
    assert env_a["GPUSHARE_DEVICE_UUIDS"] == env_b["GPUSHARE_DEVICE_UUIDS"]


def test_placement_binpack_one_card_spread_two_cards_and_cores_100_a_whole_card(
    cluster: Cluster, namespace: str
) -> None:
    """binpack puts both replicas on one card of node-2, spread on two; 100 cores is all."""
    documents = pinned(example("placement"), "node-2")
    assert cluster.apply(step(documents, "binpack"), namespace).returncode == 0
    wait_for(
        lambda: (
            len([p for p in cluster.pods(namespace) if p["status"].get("phase") == "Running"]) == 2
        ),
        "binpack replicas",
    )
    cards = {cluster.env(p, "server")["GPUSHARE_DEVICE_UUIDS"] for p in cluster.pods(namespace)}
    assert len(cards) == 1
    cluster.kubectl("delete", "-n", namespace, "deployment", "infer-binpack", "--wait=true")
    wait_for(lambda: not cluster.pods(namespace), "the binpack pods to go", 60)
    assert cluster.apply(step(documents, "spread"), namespace).returncode == 0
    wait_for(
        lambda: (
            len([p for p in cluster.pods(namespace) if p["status"].get("phase") == "Running"]) == 2
        ),
        "spread replicas",
    )
    cards = {cluster.env(p, "server")["GPUSHARE_DEVICE_UUIDS"] for p in cluster.pods(namespace)}
    assert len(cards) == 2


def test_isolation_policies_reach_the_interception_layer(cluster: Cluster, namespace: str) -> None:
    """fixed-share, burst-share, best-effort: force, default, disable; three shares, one card."""
    assert cluster.apply(pinned(example("isolation"), "node-1"), namespace).returncode == 0
    policies = {"fixed-share": "force", "burst-share": "default", "best-effort": "disable"}
    cards = set()
    for name, policy in policies.items():
        pod = cluster.wait(
            lambda name=name: cluster.running(namespace, name), f"{name} to run", namespace
        )
        env = cluster.env(pod, "worker")
        assert env.items() >= {**_limits(4096, 30), "GPU_CORE_UTILIZATION_POLICY": policy}.items()
        cards.add(env["GPUSHARE_DEVICE_UUIDS"])
    assert len(cards) == 1


def test_online_and_offline_share_a_card_with_their_priorities_and_memory(
    cluster: Cluster, namespace: str
) -> None:
    """The online service (priority 0, 5Gi) and the offline Job (priority 1, 8Gi) share a card."""
    assert cluster.apply(pinned(example("online-offline"), "node-1"), namespace).returncode == 0
    infer = cluster.wait(lambda: cluster.running(namespace, "infer"), "infer to run", namespace)
    batch = cluster.wait(lambda: cluster.running(namespace, "batch"), "batch to run", namespace)
    online = cluster.env(infer, infer["spec"]["containers"][0]["name"])
    offline = cluster.env(batch, batch["spec"]["containers"][0]["name"])
    assert online.items() >= {**_limits(5120, 60), "CUDA_TASK_PRIORITY": "0"}.items()
    assert offline.items() >= {**_limits(8192, 40), "CUDA_TASK_PRIORITY": "1"}.items()
    assert online["GPUSHARE_DEVICE_UUIDS"] == offline["GPUSHARE_DEVICE_UUIDS"]


def test_bad_input_is_refused_naming_the_field_and_the_running_pod_is_untouched(
    cluster: Cluster, namespace: str
) -> None:
    """Four bad objects are refused by kubectl, each naming its field; infer keeps its share."""
    documents = pinned(example("bad-input"), "node-1")
    assert cluster.apply(step(documents, "running"), namespace).returncode == 0
    infer = cluster.wait(lambda: cluster.running(namespace, "infer"), "infer to run", namespace)
    before = cluster.env(infer, "server")
    bad = [d for d in documents if d not in step(documents, "running")] or unlabelled(documents)
    result = cluster.apply(bad, namespace)
    assert result.returncode != 0
    for field, reason in (
        ("spec.spec.devices.requests[0].exactly.capacity.requests[memory]", "must be at most 15Gi"),
        ("spec.devices.config[0].opaque.parameters.isolation", 'Unsupported value: "fast"'),
        ("spec.spec.devices.config[0].opaque.parameters.priorty", "Unknown field"),
        ("spec.spec.devices.config[0].opaque.parameters:", "Too long"),
    ):
        assert field in result.stderr, result.stderr
        assert reason in result.stderr, result.stderr
    templates = cluster.json("resourceclaimtemplates", "-n", namespace)["items"]
    assert [t["metadata"]["name"] for t in templates] == ["share-5g-30"]  # nothing bad stored
    time.sleep(1)
    after = cluster.running(namespace, "infer")
    assert after is not None
    assert after["metadata"]["uid"] == infer["metadata"]["uid"]
    assert cluster.env(after, "server") == before
