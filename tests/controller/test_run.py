"""The controller process: configuration errors, start, leading, stopping on request."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from controller.kit import NAMES, node
from controller.test_controller_e2e import bound, gated_pod, harness, template
from structlog.testing import capture_logs

from dra_driver.controller import run as controller_run
from dra_driver.controller.settings import ControllerSettings
from dra_driver.controller.view import ClusterView
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.metrics.watchdog import Watched

NO_METRICS = ObservabilitySettings(metrics_port=-1)


def test_missing_kubeconfig_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreadable kubeconfig exits 2 before anything starts."""
    status = controller_run.run(
        NAMES,
        ControllerSettings(),
        KubeClientSettings(kubeconfig=str(tmp_path / "missing")),
        NO_METRICS,
        stop=threading.Event(),
    )
    assert status == controller_run.EXIT_CONFIG
    captured = capsys.readouterr()
    assert str(tmp_path / "missing") in captured.out + captured.err


def test_bad_leader_election_timings_are_a_configuration_error(work_dir: Path) -> None:
    """A renew deadline longer than the lease is refused with exit 2, not sys.exit deep inside."""
    with harness(work_dir, node("node-a", 1)) as cluster:
        status = controller_run.run(
            NAMES,
            ControllerSettings(lease_duration=5, renew_deadline=10),
            KubeClientSettings(kubeconfig=str(cluster.kubeconfig())),
            NO_METRICS,
            stop=threading.Event(),
        )
    assert status == controller_run.EXIT_CONFIG


def test_process_leads_allocates_and_stops_cleanly(work_dir: Path) -> None:
    """With leader election on, the process takes the Lease, ungates a pod and exits 0 on stop.

    Once its informers have synced it freezes its heap, so the collector stops walking them.
    """
    with harness(work_dir, node("node-a", 1)) as cluster, capture_logs() as logs:
        stop = threading.Event()
        statuses: list[int] = []
        settings = ControllerSettings(
            leader_election_namespace="default",
            leader_election_identity="replica-1",
            lease_duration=3,
            renew_deadline=2,
            retry_period=1,
        )
        thread = threading.Thread(
            target=lambda: statuses.append(
                controller_run.run(
                    NAMES,
                    settings,
                    KubeClientSettings(kubeconfig=str(cluster.kubeconfig())),
                    NO_METRICS,
                    stop=stop,
                )
            )
        )
        thread.start()
        try:
            cluster.apply([template("share", "20", "1Gi"), gated_pod("p", "share")])
            cluster.wait_for(lambda: bound(cluster, "p"), "the pod to be bound", timeout=20)
            cluster.wait_for(
                lambda: any(e["event"] == "controller.synced" for e in logs),
                "the heap to be frozen",
                timeout=5,
            )
        finally:
            stop.set()
            thread.join(20)
            gc.unfreeze()  # the test process's heap is not the controller's to keep
        assert statuses == [0]
    (synced,) = [e for e in logs if e["event"] == "controller.synced"]
    assert synced["frozen_objects"] > 10_000  # every module and cache loaded by then


class _Hosted:
    """A stand-in for the webhook: records the view it got and whether it was stopped."""

    def __init__(self, view: ClusterView) -> None:
        self.synced_when_hosted = view.synced
        self.claims = view.claims
        self.stopped = False

    def loops(self) -> list[Watched]:
        return []

    def stop(self) -> None:
        self.stopped = True


def test_a_hosted_part_gets_the_informers_before_they_start_and_stops_after(
    work_dir: Path,
) -> None:
    """host() is given the controller's view unstarted; it is stopped when the run ends."""
    hosted: list[_Hosted] = []

    def host(view: ClusterView) -> _Hosted:
        hosted.append(_Hosted(view))
        return hosted[-1]

    with harness(work_dir, node("node-a", 1)) as cluster:
        stop = threading.Event()
        thread = threading.Thread(
            target=controller_run.run,
            args=(
                NAMES,
                ControllerSettings(leader_elect=False),
                KubeClientSettings(kubeconfig=str(cluster.kubeconfig())),
                NO_METRICS,
                stop,
            ),
            kwargs={"host": host},
            daemon=True,
        )
        thread.start()
        try:
            cluster.apply([template("share", "20", "1Gi"), gated_pod("p", "share")])
            cluster.wait_for(lambda: bound(cluster, "p"), "the pod to be bound", timeout=20)
            assert hosted[0].claims.synced
            assert not hosted[0].stopped
        finally:
            stop.set()
            thread.join(20)
    assert [h.synced_when_hosted for h in hosted] == [False]
    assert hosted[0].stopped


def test_a_hosted_part_that_cannot_start_ends_the_run_with_its_error(work_dir: Path) -> None:
    """What host() raises comes out of run() (the CLI reports it) before the controller starts."""

    def refuse(view: ClusterView) -> _Hosted:
        raise OSError(f"port taken; informers started: {view.claims.synced}")

    with (
        harness(work_dir, node("node-a", 1)) as cluster,
        pytest.raises(OSError, match="port taken; informers started: False"),
    ):
        controller_run.run(
            NAMES,
            ControllerSettings(leader_elect=False),
            KubeClientSettings(kubeconfig=str(cluster.kubeconfig())),
            NO_METRICS,
            stop=threading.Event(),
            host=refuse,
        )
