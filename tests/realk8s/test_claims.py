"""Claims with a config on a real API server: every controller write lands, and claims go.

A real API server keeps a config's opaque parameters as the bytes kubectl sent and refuses an
update whose spec bytes differ. The controller used to send claims back whole (a PUT, spaced
JSON): every claim made from a template with a GpuShareConfig then stayed Terminating.
"""

from __future__ import annotations

import time

from dra_driver.controller.writes import ClaimWriter
from realk8s.kit import Cluster, example, pinned, wait_for

HOLD = "example.com/hold"
CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: configured}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpushare.dra.dev
        capacity: {requests: {cores: "30", memory: 3Gi}}
    config:
    - requests: [gpu]
      opaque:
        driver: gpushare.dra.dev
        parameters: {kind: GpuShareConfig, apiVersion: gpushare.dra.dev/v1alpha1,
                     isolation: fixed-share}
"""


def test_every_finalizer_and_status_write_lands_on_a_kubectl_applied_claim(
    cluster: Cluster, namespace: str
) -> None:
    """Add, append and remove our finalizer and clear the status of a claim kubectl made."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=CLAIM)
    claim = cluster.json("resourceclaim", "configured", "-n", namespace)
    # Another finalizer name: the running controller would remove its own stray one meanwhile.
    writer = ClaimWriter(cluster.api, HOLD)
    committed = writer.add_finalizer(claim)  # a PUT here was refused: "spec: ... immutable"
    assert committed["metadata"]["finalizers"] == [HOLD]
    released = writer.remove_finalizer(writer.clear_allocation(committed))
    assert not released["metadata"].get("finalizers")
    appended = writer._append_finalizer(released)  # the leader's, beside its status patch
    assert appended["metadata"]["finalizers"] == [HOLD]
    writer.remove_finalizer(appended)
    stored = cluster.json("resourceclaim", "configured", "-n", namespace)
    assert stored["spec"] == claim["spec"]  # the config as kubectl sent it


def test_a_claim_from_a_kubectl_applied_template_with_a_config_is_gone_within_10_s(
    cluster: Cluster, namespace: str
) -> None:
    """The acceptance the real API server set: released, finalizer off, deleted, within 10 s."""
    assert cluster.apply(pinned(example("isolation"), "node-2"), namespace).returncode == 0
    for name in ("fixed-share", "burst-share", "best-effort"):
        cluster.wait(lambda name=name: cluster.running(namespace, name), f"{name}", namespace)
    claims = [c["metadata"]["name"] for c in cluster.claims(namespace)]
    assert len(claims) == 3
    assert all(c["spec"]["devices"]["config"] for c in cluster.claims(namespace))
    started = time.monotonic()
    cluster.kubectl("delete", "-n", namespace, "pods", "--all", "--wait=false")
    wait_for(lambda: not cluster.claims(namespace), "the claims to be deleted", 10)
    assert time.monotonic() - started <= 10
