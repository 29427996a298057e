"""``gpushare-dra status`` and GpuShareQuotas: used counted from the claims, who waits on one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpushare_simulator.harness.apiserver import FakeApiServer
from ops.builders import NAMES, claim, pod, seed_cards, share, whole

from dra_driver.cli.main import main

OFFLINE_SHARE = "7d3f1c2a-0000-4000-8000-000000000002"
# The quota's status says nothing is used: status must count the claims itself.
QUOTAS = """\
apiVersion: gpushare.dra.dev/v1alpha1
kind: GpuShareQuota
metadata: {name: gpu, namespace: default}
spec:
  hard: {cores: "100", memory: 10Gi, cards: "1"}
status:
  used: {cores: "0", memory: "0", cards: "0"}
  claims: 0
---
apiVersion: gpushare.dra.dev/v1alpha1
kind: GpuShareQuota
metadata: {name: offline, namespace: default}
spec:
  hard: {cores: "50"}
  priority: offline
---
apiVersion: gpushare.dra.dev/v1alpha1
kind: GpuShareQuota
metadata: {name: broken, namespace: default}
spec:
  hard: {cores: "1.5"}
"""


def _allocate(server: FakeApiServer, name: str, wanted: dict[str, Any]) -> None:
    server.create(claim(name))
    current = server.get("resourceclaims", "default", name)
    assert current is not None
    server.update_status({**current, "status": wanted["status"]})


def _warning(server: FakeApiServer, waiting: dict[str, Any], reason: str, message: str) -> None:
    meta = waiting["metadata"]
    server.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{reason.lower()}", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": meta["name"]}
            | {"uid": meta["uid"]},
            "type": "Warning",
            "reason": reason,
            "message": message,
            "lastTimestamp": "2026-11-26T00:00:00Z",
        }
    )


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """Serve two shares (one offline) and a whole card in default, its quotas, two waiting pods."""
    with FakeApiServer() as running:
        seed_cards(running)
        _allocate(running, "a", claim("a", results=[share("gpu-0", "30", "4Gi")], pods=("pa",)))
        offline = claim("b", results=[share("gpu-0", "40", "2Gi", OFFLINE_SHARE)], pods=("pb",))
        parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind}
        offline["status"]["allocation"]["devices"]["config"] = [
            {
                "source": "FromClaim",
                "requests": ["gpu"],
                "opaque": {
                    "driver": NAMES.driver,
                    "parameters": parameters | {"priority": "offline"},
                },
            }
        ]
        _allocate(running, "b", offline)
        _allocate(running, "w", claim("w", results=[whole("gpu-1")], pods=("pw",)))
        for quota in yaml.safe_load_all(QUOTAS):
            running.create(quota)
        gate = (NAMES.scheduling_gate,)
        held = running.create(pod("held", gates=gate, claim_name="more"))
        message = "GpuShareQuota default/gpu: cores used 170, asked 30, hard 100"
        _warning(running, held, "QuotaExceeded", message)
        waits = running.create(pod("waits", gates=gate, claim_name="big"))
        _warning(running, waits, "FailedAllocation", "no card has 20Gi free")
        yield running
        assert running.internal_errors == []


def _json(server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"], environ={}) == 0
    return json.loads(capsys.readouterr().out)


def test_each_quota_is_counted_from_the_claims_not_from_its_status(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shares count their size, a whole card 100 cores, 15Gi and a card; status is ignored."""
    (gpu, offline) = _json(server, tmp_path, capsys)["quotas"]
    assert gpu == {
        "namespace": "default",
        "name": "gpu",
        "priority": None,
        "limits": {
            "cores": {"used": "170", "hard": "100"},
            "memory": {"used": "21Gi", "hard": "10Gi"},
            "cards": {"used": "1", "hard": "1"},
        },
        "claims": 3,
        "exceeded": ["cores", "memory"],
        "waiting": ["default/held"],
    }
    assert offline["name"] == "offline"


def test_an_offline_quota_counts_only_the_offline_share(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """priority: offline counts claim b's 40 offline cores, not a's online share or w's card."""
    (_, offline) = _json(server, tmp_path, capsys)["quotas"]
    assert (offline["priority"], offline["claims"]) == ("offline", 1)
    assert offline["limits"] == {"cores": {"used": "40", "hard": "50"}}
    assert (offline["exceeded"], offline["waiting"]) == ([], [])


def test_a_pod_whose_newest_warning_is_quota_exceeded_waits_on_the_quota(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QuotaExceeded marks the pod as waiting on a quota; a FailedAllocation pod is not."""
    waiting = {w["pod"]: w for w in _json(server, tmp_path, capsys)["waiting"]}
    assert waiting["default/held"] == {
        "pod": "default/held",
        "gated": True,
        "reason": "QuotaExceeded: GpuShareQuota default/gpu: cores used 170, asked 30, hard 100",
        "waitsOnQuota": True,
    }
    assert waiting["default/waits"]["waitsOnQuota"] is False


def test_a_malformed_quota_is_named_with_its_field(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A quota the driver cannot read is listed as a problem naming the field, not counted."""
    assert _json(server, tmp_path, capsys)["quotaProblems"] == [
        "GpuShareQuota default/broken: spec.hard.cores must be a whole number, is 1.5"
    ]


def test_the_table_shows_used_of_hard_and_who_waits(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One row per quota: used/hard per limited resource, priority, exceeded, waiting pods."""
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["status", "--kubeconfig", str(kubeconfig)], environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("QUOTA "))
    assert re.split(r"  +", header) == [
        "QUOTA", "PRIORITY", "CORES USED/HARD", "MEMORY USED/HARD", "CARDS USED/HARD", "CLAIMS",
        "EXCEEDED", "WAITING PODS",
    ]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("default/")}
    assert rows["default/gpu"] == [
        "default/gpu", "any", "170/100", "21Gi/10Gi", "1/1", "3", "yes:", "cores,", "memory",
        "default/held",
    ]  # fmt: skip
    assert rows["default/offline"] == [
        "default/offline", "offline", "40/50", "-", "-", "1", "no", "-",
    ]  # fmt: skip
    assert "  GpuShareQuota default/broken: spec.hard.cores must be a whole number, is 1.5" in lines


@pytest.mark.parametrize(("code", "problems"), [(404, 0), (403, 1)])
def test_quotas_that_cannot_be_listed_do_not_fail_status(
    server: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    code: int,
    problems: int,
) -> None:
    """No CRD (404): no quotas, nothing said; forbidden (403): no quotas, and it says why."""
    server.faults.inject(verb="list", resource="gpusharequotas", status=code)
    view = _json(server, tmp_path, capsys)
    assert (view["quotas"], len(view["quotaProblems"])) == ([], problems)
    assert [c["device"] for c in view["cards"]] == ["gpu-0", "gpu-0", "gpu-1"]
    if problems:
        assert view["quotaProblems"][0].startswith(
            "cannot list gpusharequotas.gpushare.dra.dev, quotas not shown: 403"
        )
