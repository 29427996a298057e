"""``gpushare-dra cleanup``: finalizers and gates removed once the driver's pods are gone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from kubernetes import client
from ops.builders import NAMES, claim, pod, share

from dra_driver.cli.main import main
from dra_driver.ops.cleanup import Cleaner, CleanupError

OTHER_FINALIZER = "example.com/keep"
OTHER_GATE = "example.com/wait"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """Serve claims and pods left behind by an uninstalled driver."""
    with FakeApiServer() as running:
        ours = claim("ours", finalizers=(NAMES.finalizer, OTHER_FINALIZER))
        running.create(ours)
        store(running, claim("ours", results=[share("gpu-0", "30", "4Gi")], pods=("p1",)))
        running.create(claim("plain", finalizers=(OTHER_FINALIZER,)))
        running.create(pod("gated", gates=(NAMES.scheduling_gate, OTHER_GATE), claim_name="plain"))
        running.create(pod("free"))
        yield running
        assert running.internal_errors == []


def store(server: FakeApiServer, wanted: dict[str, object]) -> None:
    """Give the stored claim of the same name ``wanted``'s status (create drops status)."""
    metadata = wanted["metadata"]
    assert isinstance(metadata, dict)
    current = server.get("resourceclaims", "default", metadata["name"])
    assert current is not None
    server.update_status({**current, "status": wanted["status"]})


def _run(kubeconfig: Path, *args: str) -> int:
    return main(["cleanup", "--kubeconfig", str(kubeconfig), *args], environ={})


def test_cleanup_removes_only_our_finalizer_and_gate_and_says_so(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Our finalizer and gate go; other finalizers, gates and the allocation stay."""
    assert _run(server.write_kubeconfig(tmp_path / "kubeconfig")) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"removed finalizer {NAMES.finalizer} from 1 ResourceClaim(s)",
        "  default/ours",
        f"removed scheduling gate {NAMES.scheduling_gate} from 1 pod(s)",
        "  default/gated",
    ]
    ours = server.get("resourceclaims", "default", "ours")
    assert ours is not None
    assert ours["metadata"]["finalizers"] == [OTHER_FINALIZER]
    assert ours["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    gated = server.get("pods", "default", "gated")
    assert gated is not None
    assert gated["spec"]["schedulingGates"] == [{"name": OTHER_GATE}]


def test_a_second_run_changes_nothing(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cleanup is idempotent: the second run writes nothing and says there was nothing left."""
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    assert _run(kubeconfig) == 0
    capsys.readouterr()
    server.reset_requests()
    assert _run(kubeconfig, "-o", "json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "dryRun": False,
        "finalizersRemoved": [],
        "gatesRemoved": [],
    }
    assert [key for key in server.requests if key[0] not in ("list", "get")] == []


def test_dry_run_reports_and_writes_nothing(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dry-run names what it would change and sends no write."""
    server.reset_requests()
    assert _run(server.write_kubeconfig(tmp_path / "kubeconfig"), "--dry-run", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "dryRun": True,
        "finalizersRemoved": ["default/ours"],
        "gatesRemoved": ["default/gated"],
    }
    assert [key for key in server.requests if key[0] not in ("list", "get")] == []


def test_it_waits_for_the_drivers_pods_and_gives_up_naming_them(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While a controller pod matches --wait-for-pods, cleanup changes nothing and exits 1."""
    labels = {"app.kubernetes.io/instance": "gpushare", "app.kubernetes.io/component": "controller"}
    server.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpushare-system"}}
    )
    server.create(pod("controller-0", labels=labels, namespace="gpushare-system"))
    server.reset_requests()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    selector = "app.kubernetes.io/instance=gpushare,app.kubernetes.io/component in (controller)"
    args = ("--namespace", "gpushare-system", "--wait-for-pods", selector, "--wait-timeout", "0")
    assert _run(kubeconfig, *args) == 1
    assert capsys.readouterr().err.strip() == (
        "gpushare-dra cleanup: error: after 0 s these pods of the driver still run: "
        "gpushare-system/controller-0; uninstall the driver first (helm uninstall), or raise "
        "--wait-timeout"
    )
    assert [key for key in server.requests if key[0] not in ("list", "get")] == []
    server.delete("pods", "gpushare-system", "controller-0")
    assert _run(kubeconfig, *args) == 0


def test_wait_for_pods_needs_a_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--wait-for-pods without --namespace is a usage error (exit 2) naming both flags."""
    assert _run(tmp_path / "kubeconfig", "--wait-for-pods", "a=b") == 2
    assert "--wait-for-pods needs --namespace" in capsys.readouterr().err


def test_a_claim_changed_meanwhile_is_read_again_and_its_new_finalizers_kept(
    server: FakeApiServer,
) -> None:
    """A finalizer added after cleanup read the claim survives: the stale patch is refused."""
    stale = server.get("resourceclaims", "default", "ours")
    assert stale is not None
    current = json.loads(json.dumps(stale))
    current["metadata"]["finalizers"].append("example.com/late")
    server.update(current)
    # The patch computed from the stale copy must not land: it would drop the late finalizer.
    with server.api_client() as api_client:
        assert Cleaner(api_client, NAMES)._patch_claim(client.ResourceV1Api(api_client), stale)
    after = server.get("resourceclaims", "default", "ours")
    assert after is not None
    assert after["metadata"]["finalizers"] == [OTHER_FINALIZER, "example.com/late"]


def test_an_object_that_keeps_changing_is_an_error_not_a_loop(server: FakeApiServer) -> None:
    """Three refused patches in a row end in CleanupError telling to run cleanup again."""
    server.faults.inject(verb="patch", resource="pods", status=422, times=3)
    with server.api_client() as api_client, pytest.raises(CleanupError, match="kept changing"):
        Cleaner(api_client, NAMES).run(dry_run=False)
