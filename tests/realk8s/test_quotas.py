"""GpuShareQuota on a real API server: the chart's CRD, the controller's ceiling, the webhook.

Every object is applied as YAML with kubectl, as a user would. The plane has three T4s (300
cores, 48Gi), so in each test the quota, not the cards, is what runs out.
"""

from __future__ import annotations

from typing import Any

import yaml

from dra_driver.api import DEFAULT_DRIVER_NAME
from realk8s.kit import Cluster, wait_for

DRIVER = DEFAULT_DRIVER_NAME
TEMPLATE = f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: share}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: {DRIVER}
          capacity: {{requests: {{cores: "30", memory: 3Gi}}}}
"""


def quota(name: str, **hard: str) -> str:
    """Return a GpuShareQuota as a user writes it."""
    return f"""\
apiVersion: {DRIVER}/v1alpha1
kind: GpuShareQuota
metadata: {{name: {name}}}
spec:
  hard: {yaml.safe_dump(hard, default_flow_style=True).strip()}
"""


def pod(name: str, labels: dict[str, str] | None = None) -> str:
    """Return a pod with one 30-core, 3Gi share from the template."""
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "containers": [
                {"name": "app", "image": "registry.k8s.io/pause:3.10",
                 "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "share"}],
        },
    }  # fmt: skip
    return yaml.safe_dump(document)


def apply(cluster: Cluster, namespace: str, *documents: str, check: bool = True) -> str:
    """``kubectl apply`` the documents; return stderr (the refusal, when one is expected)."""
    result = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", stdin="---\n".join(documents), check=check
    )
    return result.stderr


def running(cluster: Cluster, namespace: str) -> list[str]:
    """Names of the namespace's pods that run."""
    return sorted(
        p["metadata"]["name"]
        for p in cluster.pods(namespace)
        if (p.get("status") or {}).get("phase") == "Running"
    )


def waiting_on_quota(cluster: Cluster, namespace: str, name: str) -> str | None:
    """Return the QuotaExceeded event's message about pod ``name``, once there is one."""
    messages = [m for m in cluster.events(namespace, name) if "GpuShareQuota" in m]
    return messages[-1] if messages else None


def counted(cluster: Cluster, namespace: str, claims: int) -> dict[str, Any] | None:
    """Return quota gpu's status once it counts ``claims`` claims."""
    status = cluster.json(f"gpusharequotas.{DRIVER}", "gpu", "-n", namespace).get("status")
    return status if (status or {}).get("claims") == claims else None


def test_shares_run_up_to_the_ceiling_and_the_next_runs_when_one_ends(
    cluster: Cluster, namespace: str
) -> None:
    """100 cores / 10Gi: three 30-core shares run, the fourth waits naming the quota, then runs."""
    apply(cluster, namespace, quota("gpu", cores="100", memory="10Gi"), TEMPLATE)
    apply(cluster, namespace, pod("a"), pod("b"), pod("c"))
    cluster.wait(lambda: running(cluster, namespace) == ["a", "b", "c"], "three pods", namespace)
    apply(cluster, namespace, pod("d"))
    message = cluster.wait(
        lambda: waiting_on_quota(cluster, namespace, "d"), "d to wait on the quota", namespace
    )
    assert f"GpuShareQuota {namespace}/gpu: cores used 90, asked 30, hard 100" in message
    assert running(cluster, namespace) == ["a", "b", "c"]
    status = cluster.wait(lambda: counted(cluster, namespace, 3), "the quota's status", namespace)
    assert status["used"]["cores"] == "90"
    assert status["used"]["memory"] == "9Gi"
    cluster.kubectl("delete", "pod", "a", "-n", namespace, "--wait=false")
    cluster.wait(lambda: "d" in running(cluster, namespace), "d to run", namespace, timeout=60)


def test_a_claim_over_a_quota_by_itself_is_refused_at_creation(
    cluster: Cluster, namespace: str
) -> None:
    """A 12Gi share where the quota allows 10Gi could never run: kubectl apply is refused."""
    apply(cluster, namespace, quota("gpu", cores="100", memory="10Gi"))
    large = TEMPLATE.replace("memory: 3Gi", "memory: 12Gi").replace("name: share", "name: big")
    error = apply(cluster, namespace, large, check=False)
    assert f"GpuShareQuota {namespace}/gpu allows memory 10Gi" in error
    assert "this claim alone asks at least 12Gi" in error


def test_two_quotas_in_a_namespace_both_hold(cluster: Cluster, namespace: str) -> None:
    """Cores would admit three shares, an 8Gi memory quota two: two run, the third waits on it."""
    apply(
        cluster,
        namespace,
        quota("cores", cores="100"),
        quota("memory", memory="8Gi"),
        TEMPLATE,
    )
    apply(cluster, namespace, pod("a"), pod("b"))
    cluster.wait(lambda: running(cluster, namespace) == ["a", "b"], "two pods", namespace)
    apply(cluster, namespace, pod("c"))
    message = cluster.wait(
        lambda: waiting_on_quota(cluster, namespace, "c"), "c to wait on a quota", namespace
    )
    assert f"GpuShareQuota {namespace}/memory: memory used 6Gi, asked 3Gi, hard 8Gi" in message
    assert "cores" not in message


def test_a_pod_the_webhook_did_not_gate_sets_exceeded_naming_its_claim(
    cluster: Cluster, namespace: str
) -> None:
    """kube-scheduler allocates what the controller never saw: counted, and Exceeded says who."""
    apply(cluster, namespace, quota("gpu", cores="50"), TEMPLATE)
    opted_out = {f"{DRIVER}/webhook": "disabled"}
    apply(cluster, namespace, pod("a", opted_out), pod("b", opted_out))
    cluster.wait(lambda: running(cluster, namespace) == ["a", "b"], "two pods", namespace)

    def exceeded() -> dict[str, Any] | None:
        status = cluster.json(f"gpusharequotas.{DRIVER}", "gpu", "-n", namespace).get("status")
        conditions = (status or {}).get("conditions") or []
        found = [c for c in conditions if c["type"] == "Exceeded" and c["status"] == "True"]
        return found[0] if found else None

    condition = cluster.wait(exceeded, "Exceeded=True", namespace)
    assert condition["reason"] == "AllocatedOutsideController"
    claims = sorted(c["metadata"]["name"] for c in cluster.claims(namespace))
    assert all(name in condition["message"] for name in claims)
    wait_for(
        lambda: any("over hard" in m for m in cluster.events(namespace, "gpu")),
        "the QuotaExceeded event on the quota",
    )
