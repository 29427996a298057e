"""The node monitor over real region files: suspension, burst, trust, refusal, release."""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from gpushare_simulator.harness.regions import FakeProcess, FakeTask
from hamicore.golden import golden_region
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from dra_driver.api import Backend, Isolation, Priority
from dra_driver.hamicore.layout import INT32
from dra_driver.kubeletplugin import monitor as monitor_module
from dra_driver.kubeletplugin.entries import (
    ClaimEntry,
    ClaimRef,
    ClaimState,
    ShareCard,
    ShareInfo,
)
from dra_driver.kubeletplugin.metrics import ShareCollector
from dra_driver.kubeletplugin.monitor import MonitoredClaim, RegionMonitor, monitored_claims

A, B = "GPU-aaaaaaaa-0000-4000-8000-000000000001", "GPU-bbbbbbbb-0000-4000-8000-000000000002"
GI = 1 << 30


class Node:
    """Claims prepared on a node, each with a directory its containers write regions into."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.claims: dict[str, MonitoredClaim] = {}

    def claim(
        self,
        uid: str,
        priority: Priority,
        cards: tuple[str, ...] = (A,),
        isolation: Isolation = Isolation.BURST_SHARE,
    ) -> MonitoredClaim:
        info = ShareInfo(
            backend=Backend.HAMI_CORE,
            isolation=isolation,
            priority=priority,
            pods=(f"pod-{uid}",),
            cards=tuple(ShareCard(uuid, 30, 4 * GI) for uuid in cards),
        )
        claim = MonitoredClaim(ClaimRef("default", uid, f"claim-{uid}"), info)
        self.claims[uid] = claim
        (self.root / uid).mkdir()
        return claim

    def task(
        self, uid: str, request: str = "gpu", cards: tuple[str, ...] = (A,), priority: int = 0
    ) -> FakeTask:
        return FakeTask(
            self.root / uid / f"{request}.cache",
            cards,
            limits=[4 * GI] * len(cards),
            sm_limits=[30] * len(cards),
            priority=priority,
        )

    def monitor(
        self, period: float = 0.05, running: Callable[[], set[int] | None] = lambda: None
    ) -> RegionMonitor:
        return RegionMonitor(
            self.root, lambda: list(self.claims.values()), period=period, running_pids=running
        )

    def offline_held(
        self, running: Callable[[], set[int] | None] = lambda: None
    ) -> tuple[FakeTask, FakeTask, RegionMonitor]:
        """Online work busy (hostpid 1001, 30 %) on the card holds offline work after a pass."""
        self.claim("on", Priority.ONLINE)
        self.claim("off", Priority.OFFLINE)
        online, offline = self.task("on"), self.task("off", priority=1)
        monitor = self.monitor(running=running)
        report_sm_use(online, 30)
        offline.launch()
        monitor.tick()
        assert offline.suspended
        return online, offline, monitor


def report_sm_use(task: FakeTask, percent: int) -> None:
    """Write what the library's watcher samples: one process using ``percent`` of each card."""
    task.set_processes([FakeProcess(1, 1001, [GI] * task.cards, [percent] * task.cards)])


@pytest.fixture
def node(tmp_path: Path) -> Node:
    root = tmp_path / "claims"
    root.mkdir()
    return Node(root)


def test_offline_work_is_suspended_at_the_next_pass_and_resumed_when_online_idles(
    node: Node,
) -> None:
    """Online busy: offline held at the next pass; once online reports no SM use: it runs."""
    node.claim("on", Priority.ONLINE)
    node.claim("off", Priority.OFFLINE)
    online, offline = node.task("on"), node.task("off", priority=1)
    monitor = node.monitor()
    report_sm_use(online, 30)
    online.launch()
    offline.launch()
    monitor.tick()
    assert offline.suspended
    assert not offline.launch()  # the library would hold this launch
    assert not online.suspended
    monitor.tick()  # its mark has run out, but its processes still use the card
    assert offline.suspended
    report_sm_use(online, 0)
    monitor.tick()
    assert not offline.suspended
    assert offline.launch()


def test_offline_work_resumes_once_the_online_tasks_processes_exited(node: Node) -> None:
    """An online task whose process exited keeps its last SM figure, yet counts as idle."""
    online, offline, monitor = node.offline_held()
    online.exit(0)  # its slot keeps sm_util 30 and proc_num stays 1
    monitor.tick()
    assert not offline.suspended
    assert offline.launch()


def test_offline_work_resumes_within_two_periods_of_an_online_process_killed(
    node: Node,
) -> None:
    """A SIGKILLed process clears nothing in its slot; NVML no longer lists it: it is idle."""
    running = {1001}  # host PIDs NVML lists on the cards
    _, offline, monitor = node.offline_held(lambda: running)
    running.clear()  # SIGKILL: the slot keeps pid 1001 and sm_util 30, NVML lists nothing
    monitor.tick()
    assert not offline.suspended
    assert offline.launch()


def test_without_nvmls_list_every_slot_with_a_pid_counts(node: Node) -> None:
    """Fake cards (no process list): a slot's SM use still holds offline work, as before."""
    _, offline, monitor = node.offline_held(lambda: None)
    monitor.tick()
    assert offline.suspended


def test_a_bursting_task_no_longer_marks_its_launches_yet_counts_as_busy(node: Node) -> None:
    """Lone online work bursts, so its launches go unmarked; its SM use alone holds offline."""
    node.claim("on", Priority.ONLINE)
    node.claim("off", Priority.OFFLINE)
    online, offline = node.task("on"), node.task("off", priority=1)
    monitor = node.monitor()
    online.launch()
    offline.launch()
    monitor.tick()
    assert online.utilization_switch == 0
    assert not online.rate_limited()
    for _ in range(3):
        online.launch()  # the fast path: recent_kernel is left to run out
        monitor.tick()
    assert online.recent_kernel == 0
    assert not offline.suspended  # without SM use it is not busy for anyone
    report_sm_use(online, 100)
    monitor.tick()
    assert offline.suspended


def test_a_lone_busy_burst_share_task_bursts_and_two_busy_peers_do_not(node: Node) -> None:
    """Alone and busy: switch 0; with a busy peer of its priority on the card: both 1."""
    node.claim("a", Priority.ONLINE)
    node.claim("b", Priority.ONLINE)
    first, second = node.task("a"), node.task("b")
    monitor = node.monitor()
    report_sm_use(first, 30)
    first.launch()
    monitor.tick()
    assert (first.utilization_switch, second.utilization_switch) == (0, 0)
    assert second.launch()  # idle, it was let burst too: only its SM use shows it now
    report_sm_use(second, 30)
    monitor.tick()
    assert (first.utilization_switch, second.utilization_switch) == (1, 1)


def test_priority_and_cards_come_from_the_claim_not_from_the_region(node: Node) -> None:
    """An offline claim's region posing as online on another card suspends nobody there."""
    node.claim("on", Priority.ONLINE, cards=(B,))
    node.claim("off", Priority.OFFLINE, cards=(A,))
    victim = node.task("on", cards=(B,))
    # The offline container writes priority 0 and names card B as its own.
    impostor = node.task("off", cards=(A, B), priority=0)
    impostor.launch()
    victim.launch()
    node.monitor().tick()
    assert not victim.suspended
    assert victim.utilization_switch == 0  # alone on B: the impostor is not counted there


def test_a_claim_spanning_two_cards_is_suspended_by_online_work_on_either(node: Node) -> None:
    """Offline on A and B; online busy on B only: offline is held."""
    node.claim("on", Priority.ONLINE, cards=(B,))
    node.claim("off", Priority.OFFLINE, cards=(A, B))
    online, offline = node.task("on", cards=(B,)), node.task("off", cards=(A, B), priority=1)
    online.launch()
    offline.launch()
    node.monitor().tick()
    assert offline.suspended


def test_stop_resumes_what_it_suspended_and_enforces_every_limit(node: Node) -> None:
    """After stop no task stays held and none keeps a burst nobody will end."""
    node.claim("on", Priority.ONLINE)
    node.claim("off", Priority.OFFLINE)
    online, offline = node.task("on"), node.task("off", priority=1)
    online.launch()
    offline.launch()
    monitor = node.monitor(period=60)  # its thread decides once, at start
    monitor.start()
    deadline = time.monotonic() + 10
    while not offline.suspended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert offline.suspended
    assert online.utilization_switch == 0
    monitor.stop()
    assert not offline.suspended
    assert (online.utilization_switch, offline.utilization_switch) == (1, 1)


def test_a_restarted_monitor_lifts_a_dead_monitors_suspension_in_its_first_pass(
    node: Node,
) -> None:
    """A region left held by a killed monitor, with no online work left, runs again."""
    node.claim("off", Priority.OFFLINE)
    offline = node.task("off", priority=1)
    offline.launch()
    node.claim("on", Priority.ONLINE)
    online = node.task("on")
    online.launch()
    node.monitor().tick()  # this monitor is then "killed": no stop(), no release
    assert offline.suspended
    del node.claims["on"]  # the online pod went away meanwhile
    node.monitor().tick()
    assert not offline.suspended


def test_an_unknown_region_is_logged_once_counted_and_never_written(node: Node) -> None:
    """A region of a format it does not know is left alone, said once, and shows in metrics."""
    node.claim("x", Priority.OFFLINE)
    path = node.root / "x" / "gpu.cache"
    data = bytearray(golden_region())
    INT32.pack_into(data, 8, 9)  # version 1.9
    path.write_bytes(bytes(data))
    monitor = node.monitor()
    registry = CollectorRegistry()
    registry.register(ShareCollector("node-1", monitor.usage, monitor.refused))
    with capture_logs() as logs:
        for _ in range(3):
            monitor.tick()
    assert path.read_bytes() == bytes(data)
    refusals = [e for e in logs if e["event"] == "monitor.region_refused"]
    assert len(refusals) == 1
    assert refusals[0]["reason"] == "version"
    assert registry.get_sample_value("gpushare_hami_regions_refused", {"reason": "version"}) == 1


def test_a_hostile_region_never_stops_the_monitor_from_serving_the_others(node: Node) -> None:
    """Symlink, FIFO and truncated files beside a real region: the real one is still decided."""
    node.claim("on", Priority.ONLINE)
    node.claim("off", Priority.OFFLINE)
    (node.root / "off" / "link.cache").symlink_to("/etc/hostname")
    os.mkfifo(node.root / "off" / "fifo.cache")
    (node.root / "off" / "short.cache").write_bytes(b"\x4e\xf9\x2f\x01" + bytes(100))
    online, offline = node.task("on"), node.task("off", priority=1)
    online.launch()
    offline.launch()
    monitor = node.monitor()
    monitor.tick()
    assert offline.suspended
    assert sum(monitor.refused().values()) == 3
    assert (node.root / "off" / "short.cache").stat().st_size == 104


def test_usage_metrics_follow_prepared_claims_and_go_with_them(node: Node) -> None:
    """Memory used and limit, SM use and suspension per claim and card; gone once unprepared."""
    node.claim("on", Priority.ONLINE)
    node.claim("off", Priority.OFFLINE, isolation=Isolation.FIXED_SHARE)
    online, offline = node.task("on"), node.task("off", priority=1)
    online.set_processes([FakeProcess(1, 1001, [GI], [40]), FakeProcess(2, 1002, [GI // 2], [5])])
    online.launch()
    offline.launch()
    monitor = node.monitor()
    registry = CollectorRegistry()
    registry.register(ShareCollector("node-1", monitor.usage, monitor.refused))
    monitor.tick()
    labels = {
        "node": "node-1", "namespace": "default", "pod": "pod-on", "claim": "claim-on", "uuid": A,
        "priority": "online", "isolation": "burst-share",
    }  # fmt: skip
    sample = registry.get_sample_value
    assert sample("gpushare_share_memory_used_bytes", labels) == GI + GI // 2
    assert sample("gpushare_share_memory_limit_bytes", labels) == 4 * GI
    assert sample("gpushare_share_sm_utilization_percent", labels) == 45
    assert sample("gpushare_share_suspended", labels) == 0
    held = {**labels, "pod": "pod-off", "claim": "claim-off", "priority": "offline",
            "isolation": "fixed-share"}  # fmt: skip
    assert sample("gpushare_share_suspended", held) == 1
    del node.claims["off"]
    monitor.tick()
    assert sample("gpushare_share_suspended", held) is None


def test_only_completed_hami_core_claims_with_a_share_are_monitored() -> None:
    """Other backends, half-done claims and entries with no share, whatever their spec, are out."""
    cards = (ShareCard(A, 30, GI),)
    info = ShareInfo(Backend.HAMI_CORE, Isolation.BURST_SHARE, Priority.ONLINE, ("p",), cards)
    mps = ShareInfo(Backend.MPS, Isolation.FIXED_SHARE, Priority.ONLINE, ("p",), cards)
    old_spec = {
        "containerEdits": {
            "env": [
                f"GPUSHARE_DEVICE_UUIDS={A}", "GPUSHARE_CORES_0=30",
                f"GPUSHARE_MEMORY_BYTES_0={GI}", "GPUSHARE_ISOLATION=fixed-share",
                "GPUSHARE_PRIORITY=offline", "GPUSHARE_BACKEND=hami-core",
            ]
        }
    }  # fmt: skip
    done = ClaimState.PREPARE_COMPLETED
    entries = [
        ClaimEntry("u1", "ns", "c1", done, "f1", share=info),
        ClaimEntry("u2", "ns", "c2", done, "f2", share=mps),
        ClaimEntry("u3", "ns", "c3", ClaimState.PREPARE_STARTED, "f3", share=info),
        ClaimEntry("u4", "ns", "c4", done, "f4", spec=json.dumps(old_spec)),
    ]
    assert monitored_claims(entries) == [MonitoredClaim(ClaimRef("ns", "u1", "c1"), info)]


def test_the_monitor_reads_no_environment_variables() -> None:
    """What the monitor acts on comes from checkpoint entries, never from GPUSHARE_ variables."""
    assert "GPUSHARE_" not in inspect.getsource(monitor_module)
