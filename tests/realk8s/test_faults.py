"""Crashes and restarts on a real plane: SIGKILLed controller and plugin, a restarted API server.

Each ends with every pod running, no card over-committed (the claims' consumed capacity per
device, as the API server stores it) and, when the workload goes, nothing of ours left.
"""

from __future__ import annotations

import collections
import time

from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.quantity import parse_quantity
from realk8s.kit import Cluster, wait_for

BURST = 6


def _burst(name: str, cores: int) -> str:
    """Return a Deployment of BURST pods, each with a share of ``cores`` cores and 1Gi."""
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpushare.dra.dev
          capacity: {{requests: {{cores: "{cores}", memory: 1Gi}}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {BURST}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      resourceClaims: [{{name: gpu, resourceClaimTemplateName: {name}}}]
      containers:
      - {{name: c, image: busybox, resources: {{claims: [{{name: gpu}}]}}}}
"""


def _all_running(cluster: Cluster, namespace: str) -> bool:
    pods = cluster.pods(namespace)
    return len(pods) == BURST and all(p["status"].get("phase") == "Running" for p in pods)


def assert_no_card_overcommitted(cluster: Cluster) -> None:
    """Sum every allocated share's consumed cores per card: none above 100."""
    resource = client.ResourceV1Api(cluster.api)
    claims = raw.call(resource.list_resource_claim_for_all_namespaces)["items"]
    cores: collections.Counter[tuple[str, str]] = collections.Counter()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            consumed = (result.get("consumedCapacity") or {}).get("cores", "100")
            cores[(result["pool"], result["device"])] += int(parse_quantity(consumed))
    assert {card: n for card, n in cores.items() if n > 100} == {}


def _settle(cluster: Cluster, namespace: str) -> None:
    cluster.wait(lambda: _all_running(cluster, namespace), "every pod to run", namespace, 90)
    assert_no_card_overcommitted(cluster)
    cluster.kubectl("delete", "-n", namespace, "deployment", "--all", "--wait=false")
    cluster.wait(lambda: not cluster.claims(namespace), "the claims to go", namespace, 60)


def test_controller_killed_mid_burst_allocates_every_pod_after_restart(
    cluster: Cluster, namespace: str
) -> None:
    """SIGKILL while six pods are being allocated; the restarted controller finishes soundly."""
    controller = cluster.driver.processes["controller"]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_burst("burst", 40))
    wait_for(lambda: len(cluster.pods(namespace)) >= 2, "the burst to begin")
    controller.kill()
    time.sleep(1)
    controller.start()
    _settle(cluster, namespace)


def test_plugin_killed_while_preparing_prepares_after_restart(
    cluster: Cluster, namespace: str
) -> None:
    """SIGKILL node-2's plugin mid-burst; the kubelet's retries reach the restarted one."""
    plugin = cluster.driver.processes["plugin-node-2"]
    pinned = _burst("prep", 30).replace(
        "      resourceClaims:",
        "      nodeSelector: {kubernetes.io/hostname: node-2}\n      resourceClaims:",
    )
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=pinned)
    wait_for(
        lambda: any((c.get("status") or {}).get("allocation") for c in cluster.claims(namespace)),
        "the first allocation",
    )
    plugin.kill()
    time.sleep(1)
    plugin.start()
    _settle(cluster, namespace)


def test_an_api_server_restart_is_ridden_out_by_every_component(
    cluster: Cluster, namespace: str
) -> None:
    """SIGKILL kube-apiserver mid-burst and start it again: the burst completes, then leaves."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_burst("after", 20))
    wait_for(lambda: len(cluster.pods(namespace)) >= 1, "the burst to begin")
    cluster.plane.restart(("kube-apiserver",), kill=True)
    _settle(cluster, namespace)
    assert all(process.running() for process in cluster.driver.processes.values())
