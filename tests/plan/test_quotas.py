"""``plan`` and GpuShareQuotas: from the inventory file or the cluster, held as the controller."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpushare_simulator.harness.apiserver import FakeApiServer
from plan.builders import NAMES, serve_runbook

from dra_driver.cli.main import main
from dra_driver.nvml.inventory import builtin_inventory, dump_inventory

QUOTA = """\
quotas:
- apiVersion: gpushare.dra.dev/v1alpha1
  kind: GpuShareQuota
  metadata: {name: gpu, namespace: team-a}
  spec:
    hard: {cores: "100", memory: 10Gi}
"""
OFFLINE_QUOTA = """\
quotas:
- apiVersion: gpushare.dra.dev/v1alpha1
  kind: GpuShareQuota
  metadata: {name: batch, namespace: team-a}
  spec:
    hard: {cores: "40"}
    priority: offline
"""


def share(name: str, cores: str, memory: str, device_class: str = NAMES.driver) -> str:
    """Return a ResourceClaimTemplate of team-a for one share, as a user writes it."""
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: team-a}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: {device_class}
          capacity: {{requests: {{cores: "{cores}", memory: {memory}}}}}
"""


def deployment(name: str, replicas: int, template: str) -> str:
    """Return a Deployment of team-a whose pods each use ``template``."""
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: team-a}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      resourceClaims: [{{name: gpu, resourceClaimTemplateName: {template}}}]
      containers: [{{name: main, image: example, resources: {{claims: [{{name: gpu}}]}}}}]
"""


THREE_SHARES = "---\n".join([share("share-50", "50", "5Gi"), deployment("infer", 3, "share-50")])


def _files(tmp_path: Path, quotas: str, workload: str) -> list[str]:
    """Write qgpu-runbook with ``quotas`` and the workload; return plan's file arguments."""
    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(dump_inventory(builtin_inventory("qgpu-runbook")) + quotas)
    (tmp_path / "work.yaml").write_text(workload)
    return ["--inventory", str(inventory), "--workload", str(tmp_path / "work.yaml")]


def _plan(argv: list[str], capsys: pytest.CaptureFixture[str], status: int = 0) -> Any:
    assert main(["plan", *argv, "-o", "json"], environ={}) == status
    return json.loads(capsys.readouterr().out)


def test_the_pod_beyond_the_quota_waits_with_the_controllers_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two 50-core 5Gi shares fill cores 100 / memory 10Gi; the third waits, under each policy."""
    document = _plan(_files(tmp_path, QUOTA, THREE_SHARES), capsys)
    for policy in document["policies"]:
        outcomes = {p["name"]: (p["outcome"], p["reason"]) for p in policy["pods"]}
        assert outcomes == {
            "infer-0": ("placed", None),
            "infer-1": ("placed", None),
            "infer-2": (
                "quota",
                "GpuShareQuota team-a/gpu: cores used 100, asked 50, hard 100; "
                "GpuShareQuota team-a/gpu: memory used 10Gi, asked 5Gi, hard 10Gi",
            ),
        }
        assert policy["summary"]["quota"] == 1
        assert policy["quotas"] == [
            {
                "namespace": "team-a",
                "name": "gpu",
                "priority": None,
                "limits": {
                    "cores": {"used": "100", "hard": "100"},
                    "memory": {"used": "10Gi", "hard": "10Gi"},
                },
                "claims": 2,
                "waiting": ["team-a/infer-2"],
            }
        ]


def test_the_table_marks_the_waiting_pod_and_shows_each_quota(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QUOTA in the pod's cells, the message as its why, the quota's use, the count at the end."""
    assert main(["plan", *_files(tmp_path, QUOTA, THREE_SHARES)], environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    assert next(line for line in lines if line.startswith("team-a/infer-2")).split() == [
        "team-a/infer-2",
        "QUOTA",
        "QUOTA",
    ]
    why = lines.index(
        "    why (binpack, spread): GpuShareQuota team-a/gpu: cores used 100, asked 50, hard 100;"
    )
    assert (
        lines[why + 1] == "      GpuShareQuota team-a/gpu: memory used 10Gi, asked 5Gi, hard 10Gi"
    )
    (row,) = [line for line in lines if line.startswith("team-a/gpu ")]
    assert row.split("  ")[-1].strip() == "cores 100/100, memory 10Gi/10Gi; 1 waiting"
    assert lines[-1] == (
        "placed 2/3 pods (binpack), 2/3 (spread); waiting on a GpuShareQuota: 1 (binpack), "
        "1 (spread)"
    )


def test_an_offline_quota_counts_only_offline_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """priority: offline lets two online 50-core shares run and holds the third offline one."""
    workload = "---\n".join(
        [
            share("online-50", "50", "5Gi"),
            share("offline-20", "20", "2Gi", NAMES.offline_device_class),
            deployment("infer", 2, "online-50"),
            deployment("batch", 3, "offline-20"),
        ]
    )
    (binpack, _) = _plan(_files(tmp_path, OFFLINE_QUOTA, workload), capsys)["policies"]
    outcomes = {p["name"]: p["outcome"] for p in binpack["pods"]}
    assert outcomes == {
        "infer-0": "placed",
        "infer-1": "placed",
        "batch-0": "placed",
        "batch-1": "placed",
        "batch-2": "quota",
    }
    (quota,) = binpack["quotas"]
    assert (quota["priority"], quota["claims"]) == ("offline", 2)
    assert quota["limits"] == {"cores": {"used": "40", "hard": "40"}}
    assert main(["plan", *_files(tmp_path, OFFLINE_QUOTA, workload)], environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [line for line in lines if line.startswith("team-a/batch ")]
    assert row.split("  ")[0] == "team-a/batch (offline only)"
    assert row.split("  ")[-1].strip() == "cores 40/40; 1 waiting"


def test_a_claim_no_quota_could_admit_is_refused_as_the_webhook_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two whole cards (200 cores) against hard cores 100: REFUSED with the webhook's words."""
    two = share("two-cards", "50", "5Gi").replace(
        '          capacity: {requests: {cores: "50", memory: 5Gi}}\n', "          count: 2\n"
    )
    workload = "---\n".join([two, deployment("train", 1, "two-cards")])
    document = _plan(_files(tmp_path, QUOTA, workload), capsys, status=3)
    (pod,) = document["policies"][0]["pods"]
    assert pod["outcome"] == "refused"
    assert (
        "spec.spec.devices.requests: Forbidden: GpuShareQuota team-a/gpu allows cores 100 in this "
        "namespace and this claim alone asks at least 200" in pod["reason"]
    )


@pytest.mark.parametrize(
    ("quotas", "error"),
    [
        (
            QUOTA.replace('cores: "100"', 'cores: "1.5"'),
            "quotas[0]: GpuShareQuota team-a/gpu: spec.hard.cores must be a whole number, is 1.5",
        ),
        (
            QUOTA.replace("    hard:", "    priorty: offline\n    hard:"),
            "quotas[0].spec.priorty: unknown field; allowed fields: hard, priority",
        ),
        (
            QUOTA.replace("kind: GpuShareQuota", "kind: ResourceQuota"),
            "quotas[0].kind: expected GpuShareQuota, got 'ResourceQuota'",
        ),
        (
            QUOTA.replace("gpushare.dra.dev/v1alpha1", "v1"),
            "quotas[0].apiVersion: expected gpushare.dra.dev/v1alpha1, got 'v1'",
        ),
        (
            QUOTA + QUOTA.removeprefix("quotas:\n"),
            "quotas[1].metadata.name: a second GpuShareQuota team-a/gpu (the first is quotas[0])",
        ),
        ("quotas: {gpu: 1}\n", "quotas: expected a list of GpuShareQuota objects"),
    ],
    ids=["whole-cores", "unknown-field", "kind", "apiVersion", "duplicate", "not-a-list"],
)
def test_a_malformed_quota_in_the_inventory_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quotas: str, error: str
) -> None:
    """A quota the driver could not read stops the plan (exit 2): file, field and problem."""
    files = _files(tmp_path, quotas, THREE_SHARES)
    assert main(["plan", *files], environ={}) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"gpushare-dra plan: error: {tmp_path / 'cluster.yaml'}: {error}\n"


def test_an_inventory_without_quotas_is_still_checked_field_by_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Beside quotas, a mistake in the inventory is refused by its own decoder, as before."""
    files = _files(tmp_path, QUOTA.replace("quotas:", "quota:"), THREE_SHARES)
    assert main(["plan", *files], environ={}) == 2
    assert "quota: unknown field; allowed fields: generate, nodes" in capsys.readouterr().err


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """Serve qgpu-runbook, the chart's classes, namespace team-a and its quota gpu."""
    with FakeApiServer() as running:
        serve_runbook(running)
        running.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
        running.create(yaml.safe_load(QUOTA)["quotas"][0])
        yield running
        assert running.internal_errors == []


def _live(server: FakeApiServer, tmp_path: Path) -> list[str]:
    (tmp_path / "work.yaml").write_text(THREE_SHARES)
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    return ["--kubeconfig", str(kubeconfig), "--workload", str(tmp_path / "work.yaml")]


def test_a_live_plan_holds_the_clusters_quota_counting_its_claims(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A running 60-core claim of team-a leaves room for none of the 50-core shares."""
    running = yaml.safe_load(share("running", "60", "4Gi"))["spec"]
    running |= {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}
    running["metadata"] = {"name": "running", "namespace": "team-a"}
    running["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": NAMES.driver, "pool": "node-2", "device": "gpu-0"}
                    | {"shareID": "7d3f1c2a-0000-4000-8000-000000000001"}
                    | {"consumedCapacity": {"cores": "60", "memory": "4Gi"}}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["node-2"]}
                        ]
                    }
                ]
            },
        }
    }
    server.create(running)
    (binpack,) = _plan([*_live(server, tmp_path), "--policy", "binpack"], capsys)["policies"]
    assert [p["outcome"] for p in binpack["pods"]] == ["quota", "quota", "quota"]
    assert binpack["pods"][0]["reason"] == (
        "GpuShareQuota team-a/gpu: cores used 60, asked 50, hard 100"
    )
    assert binpack["quotas"][0]["limits"]["cores"] == {"used": "60", "hard": "100"}


@pytest.mark.parametrize(("code", "warnings"), [(404, 0), (403, 1)])
def test_a_live_plan_without_quotas_to_read_places_every_pod(
    server: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    code: int,
    warnings: int,
) -> None:
    """No CRD (404) or no right to list (403, then a warning): planned as without quotas."""
    server.faults.inject(verb="list", resource="gpusharequotas", status=code)
    document = _plan([*_live(server, tmp_path), "--policy", "binpack"], capsys)
    (binpack,) = document["policies"]
    assert (binpack["summary"]["placed"], binpack["quotas"]) == (3, [])
    found = [p for p in document["problems"] if p.startswith("cannot list gpusharequotas")]
    assert len(found) == warnings
