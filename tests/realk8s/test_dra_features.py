"""Kubernetes DRA features the controller must honour as kube-scheduler does, on a real plane.

The controller allocates the pods it gates itself, so what kube-scheduler respects (other
scheduling gates, device taints, admin access …) it must respect too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from realk8s.kit import Cluster, Object, one_service, unhealthy

QUEUE_GATE = "example.com/queue"


def test_a_pod_held_by_a_queues_gate_gets_no_allocation_until_admitted(
    cluster: Cluster, namespace: str
) -> None:
    """With a foreign gate first the claim stays unallocated; once removed, the pod runs."""
    prefix = one_service(cluster, namespace, "node-1", gates=[QUEUE_GATE])

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


RULE = """\
apiVersion: resource.k8s.io/v1beta2
kind: DeviceTaintRule
metadata: {name: xid-79-node-1}
spec:
  deviceSelector: {driver: gpushare.dra.dev, pool: node-1, device: gpu-0}
  taint: {key: example.com/xid, value: "79", effect: NoSchedule}
"""


def _claim_pod(name: str, exactly: Object) -> list[Object]:
    """Return a template asking ``exactly`` and a pod on node-1 using it, both named ``name``."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "node-1"},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
            "containers": [
                {"name": "c", "image": "app", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }
    return [template, pod]


def _share(name: str, *, tolerate: bool) -> list[Object]:
    """Return a 10-core share's template and pod on node-1, tolerating the XID taint or not."""
    exactly: Object = {
        "deviceClassName": "gpushare.dra.dev",
        "capacity": {"requests": {"cores": "10", "memory": "1Gi"}},
    }
    if tolerate:
        exactly["tolerations"] = [
            {"key": "example.com/xid", "operator": "Equal", "value": "79", "effect": "NoSchedule"}
        ]
    return _claim_pod(name, exactly)


def test_a_device_taint_rule_keeps_untolerating_shares_off_the_card(
    cluster: Cluster, namespace: str
) -> None:
    """NoSchedule on node-1's card: a share waits, naming the taint; a tolerating one runs."""
    assert cluster.kubectl("apply", "-f", "-", stdin=RULE).returncode == 0
    try:
        assert cluster.apply(_share("plain", tolerate=False), namespace).returncode == 0
        assert cluster.apply(_share("tolerant", tolerate=True), namespace).returncode == 0
        cluster.wait(lambda: cluster.running(namespace, "tolerant"), "tolerant to run", namespace)

        def reason() -> bool:
            events = " ".join(cluster.events(namespace, "plain"))
            return "gpu-0 tainted example.com/xid=79:NoSchedule, not tolerated" in events

        cluster.wait(reason, "plain's FailedAllocation naming the taint", namespace)
        assert cluster.running(namespace, "plain") is None
    finally:
        cluster.kubectl("delete", "devicetaintrule", "xid-79-node-1", "--ignore-not-found")
    # Without the rule the card takes the plain share too.
    cluster.wait(lambda: cluster.running(namespace, "plain"), "plain to run", namespace, 60)


def _taints(cluster: Cluster, node: str, device: str) -> list[Object]:
    """Return the taints ``node``'s ResourceSlices give ``device``, as stored."""
    slices = cluster.json("resourceslices", f"--field-selector=spec.nodeName={node}")["items"]
    found = [d for s in slices for d in s["spec"].get("devices") or [] if d["name"] == device]
    return list(found[0].get("taints") or []) if found else []


def test_the_plugin_taints_a_failed_card_until_it_is_healthy_again(
    cluster: Cluster, namespace: str
) -> None:
    """XID 79 on node-1's card: the slice taints it, a share waits naming the taint, then runs."""
    with unhealthy(cluster.driver.inventory, "node-1", "gpu-0"):
        (taint,) = cluster.wait(
            lambda: _taints(cluster, "node-1", "gpu-0") or None, "gpu-0's taint", namespace
        )
        assert cluster.apply(_share("after-xid", tolerate=False), namespace).returncode == 0

        def reason() -> bool:
            events = " ".join(cluster.events(namespace, "after-xid"))
            return "gpu-0 tainted gpushare.dra.dev/unhealthy=xid-79:NoSchedule" in events

        cluster.wait(reason, "after-xid's FailedAllocation naming the taint", namespace)
        assert cluster.running(namespace, "after-xid") is None
    assert {k: taint[k] for k in ("key", "value", "effect")} == {
        "key": "gpushare.dra.dev/unhealthy", "value": "xid-79", "effect": "NoSchedule",
    }  # fmt: skip
    assert taint["timeAdded"]  # stamped by the API server
    cluster.wait(lambda: cluster.running(namespace, "after-xid"), "after-xid to run", namespace, 60)
    assert _taints(cluster, "node-1", "gpu-0") == []


def test_a_prepared_claims_status_says_what_its_containers_got(
    cluster: Cluster, namespace: str
) -> None:
    """The plugin, under its node-bound token, writes status.devices: card, cores, memory."""
    prefix = one_service(cluster, namespace, "node-1")
    pod = cluster.wait(lambda: cluster.running(namespace, prefix), f"{prefix} to run", namespace)

    def described() -> Object | None:
        claims = [c for c in cluster.claims(namespace) if (c.get("status") or {}).get("devices")]
        return claims[0] if claims else None

    claim = cluster.wait(described, "the claim's status.devices", namespace)
    (entry,) = claim["status"]["devices"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (entry["pool"], entry["device"], entry["shareID"]) == (
        "node-1", result["device"], result["shareID"],
    )  # fmt: skip
    uuid = cluster.env(pod, "server")["GPUSHARE_DEVICE_UUIDS"]
    assert entry["data"] == {
        "uuid": uuid,
        "pciBusID": "0000:00:08.0",
        "productName": "Tesla T4",
        "request": "gpu",
        "cores": 40,
        "memory": "5Gi",
        "isolation": "burst-share",
        "priority": "online",
        "backend": "hami-core",
    }
    assert entry["conditions"][0]["type"] == "Ready"
    described_text = cluster.kubectl("describe", "resourceclaim", "-n", namespace).stdout
    assert "Tesla T4" in described_text


def test_a_pod_asking_an_extended_resource_gets_a_whole_card_that_then_counts(
    cluster: Cluster, namespace: str
) -> None:
    """extendedResourceName on our class: `example.com/gpu: 1` runs on a card; a share waits."""
    resource = '{"spec":{"extendedResourceName":"example.com/gpu"}}'
    cluster.kubectl("patch", "deviceclass", "gpushare.dra.dev", "--type=merge", "-p", resource)
    try:
        legacy = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "legacy"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "node-1"},
                "containers": [
                    {
                        "name": "c",
                        "image": "cuda-app",
                        "resources": {
                            "requests": {"example.com/gpu": "1"},
                            "limits": {"example.com/gpu": "1"},
                        },
                    }
                ],
            },
        }
        assert cluster.apply([legacy], namespace).returncode == 0
        pod = cluster.wait(lambda: cluster.running(namespace, "legacy"), "legacy to run", namespace)
        env = cluster.env(pod, "c")
        assert env["CUDA_DEVICE_SM_LIMIT_0"] == "100"
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "15360m"
        assert cluster.apply(_share("after", tolerate=False), namespace).returncode == 0

        def reason() -> bool:
            return "no card with 10 cores, 1Gi memory free" in " ".join(
                cluster.events(namespace, "after")
            )

        cluster.wait(reason, "the share to wait for node-1's card", namespace)
    finally:
        cluster.kubectl(
            "patch", "deviceclass", "gpushare.dra.dev", "--type=json",
            "-p", '[{"op":"remove","path":"/spec/extendedResourceName"}]',
        )  # fmt: skip


def test_an_admin_access_pod_sees_a_full_card_and_takes_nothing_from_it(
    cluster: Cluster, namespace: str
) -> None:
    """In an admin-access namespace a monitor runs on a card used whole; status still shows one."""
    label = "resource.kubernetes.io/admin-access=true"
    cluster.kubectl("label", "namespace", namespace, label)
    whole = _claim_pod("trainer", {"deviceClassName": "gpushare.dra.dev"})
    assert cluster.apply(whole, namespace).returncode == 0
    cluster.wait(lambda: cluster.running(namespace, "trainer"), "trainer to run", namespace)
    monitor = {"deviceClassName": "gpushare.dra.dev", "adminAccess": True}
    assert cluster.apply(_claim_pod("monitor", monitor), namespace).returncode == 0
    pod = cluster.wait(lambda: cluster.running(namespace, "monitor"), "monitor to run", namespace)
    env = cluster.env(pod, "c")
    assert env["GPUSHARE_BACKEND"] == "none"
    assert "CUDA_DEVICE_SM_LIMIT_0" not in env
    (claim,) = [c for c in cluster.claims(namespace) if c["metadata"]["name"].startswith("monitor")]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result["adminAccess"]) == ("gpu-0", True)
    assert "consumedCapacity" not in result
    kubeconfig = str(cluster.plane.kubeconfig)
    status = subprocess.run(
        [sys.executable, "-m", "dra_driver", "status", "--kubeconfig", kubeconfig, "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    cards = {(c["node"], c["device"]): c for c in json.loads(status.stdout)["cards"]}
    card = cards[("node-1", "gpu-0")]
    assert card["cores"] == {"capacity": "100", "used": "100", "free": "0"}
    assert [s["claim"].split("/")[0] for s in card["shares"]] == [namespace]
    assert len(card["shares"]) == 1
