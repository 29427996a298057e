"""The controller among the cluster's other allocators, and the operator's tools, on a real plane.

kube-scheduler allocates claims of pods the webhook did not gate (first fit, no policy); the
controller must count those cards as used. A named claim shared by two pods is refused to the
second while the first uses it. ``status`` and ``plan --kubeconfig`` read the live cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from realk8s.kit import EXAMPLES, Cluster, wait_for

WHOLE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: whole}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpushare.dra.dev}}
"""


def _pod(name: str, node: str, *, gated: bool = True, claim: str | None = None) -> str:
    """Return a pod on ``node`` using the whole-card template, or the named ``claim``."""
    labels = "" if gated else "  labels: {gpushare.dra.dev/webhook: disabled}\n"
    source = f"resourceClaimName: {claim}" if claim else "resourceClaimTemplateName: whole"
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
{labels}spec:
  nodeSelector: {{kubernetes.io/hostname: {node}}}
  resourceClaims: [{{name: gpu, {source}}}]
  containers:
  - {{name: c, image: busybox, resources: {{claims: [{{name: gpu}}]}}}}
"""


def _tool(cluster: Cluster, *args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "dra_driver", *args, "--kubeconfig", str(cluster.plane.kubeconfig),
         "-o", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def test_kube_scheduler_allocations_are_counted_and_shown_by_status(
    cluster: Cluster, namespace: str
) -> None:
    """An ungated pod's card (kube-scheduler's) is not given again; status shows both pods."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=WHOLE)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_pod("stock", "node-2", gated=False))
    stock = cluster.wait(lambda: cluster.running(namespace, "stock"), "stock to run", namespace)
    assert "schedulingGates" not in stock["spec"]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_pod("ours", "node-2"))
    ours = cluster.wait(lambda: cluster.running(namespace, "ours"), "ours to run", namespace)
    cards = {cluster.env(p, "c")["GPUSHARE_DEVICE_UUIDS"] for p in (stock, ours)}
    assert len(cards) == 2  # node-2 has two cards: one each
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_pod("third", "node-2"))
    wait_for(
        lambda: any("no card with 100 cores" in m for m in cluster.events(namespace, "third")),
        "the third pod's reason",
    )
    status = json.dumps(_tool(cluster, "status"))
    for name in ("stock", "ours", "third"):
        assert f'"{namespace}/{name}"' in status or f'"{name}"' in status, status


def test_a_named_claim_in_use_is_refused_to_a_second_pod_until_the_first_is_gone(
    cluster: Cluster, namespace: str
) -> None:
    """A hami-core claim serves one pod: a second is refused, naming both; then it may run."""
    claim = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpushare.dra.dev, capacity: {requests: {cores: "20"}}}}
"""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=claim)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_pod("a", "node-1", claim="shared"))
    cluster.wait(lambda: cluster.running(namespace, "a"), "a to run", namespace)
    second = _pod("b", "node-1", claim="shared")
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=second, check=False)
    assert refused.returncode != 0
    assert 'ResourceClaim "shared" is in use by pod "a"' in refused.stderr
    cluster.kubectl("delete", "-n", namespace, "pod", "a")
    wait_for(lambda: not (cluster.claims(namespace)[0].get("status") or {}).get("reservedFor"),
             "the claim's reservation to go")  # fmt: skip
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=second)
    cluster.wait(lambda: cluster.running(namespace, "b"), "b to run after a", namespace, 60)


def test_plan_on_the_live_cluster_places_the_sharing_example(cluster: Cluster) -> None:
    """`plan --kubeconfig` reads the real cluster's slices and places both sharing pods."""
    answer = _tool(cluster, "plan", "--workload", str(Path(EXAMPLES, "sharing.yaml")))
    text = json.dumps(answer)
    assert "node-1" in text
    assert "node-2" in text
    assert "infer-a" in text
    assert "infer-b" in text
