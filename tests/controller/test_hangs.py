"""The controller never waits for ever: a silent API server costs it one timeout per request.

The test command's stall came from here: a request whose answer never came held the one
allocating worker for good, so its accounting stopped (the cards of deleted claims still
counted as taken) and no pod was allocated again. Each test below holds a request or a whole
connection open without an answer and shows the controller carrying on within a bound far
below "for ever"; with requests unbounded, each of them waits until pytest's timeout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from controller.kit import NAMES, node
from controller.test_controller_e2e import bound, claims, gated_pod, harness, template
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.podstatus import patch_pod_status
from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.controller.app import Controller
from dra_driver.controller.settings import ControllerSettings
from dra_driver.k8s.client import USER_AGENT_PREFIX
from dra_driver.k8s.settings import ApiTimeouts

SHORT = ApiTimeouts(connect=1.0, request=1.0, watch=2)
# Far above what recovering takes here (a few seconds), far below "for ever".
BOUND = 30.0
AGENT = f"{USER_AGENT_PREFIX}controller"


@contextmanager
def controller(cluster: FakeCluster) -> Iterator[tuple[Controller, CollectorRegistry]]:
    """Run one replica on its own client with short timeouts, named as the real one is."""
    registry = CollectorRegistry()
    with cluster.server.api_client(SHORT, component="controller") as api_client:
        replica = Controller(
            api_client,
            NAMES,
            ControllerSettings(leader_elect=False, resync_seconds=1.0),
            registry,
        )
        replica.start()
        try:
            yield replica, registry
        finally:
            replica.stop()


def finish(cluster: FakeCluster, name: str) -> None:
    """Mark a bound pod Succeeded, as its kubelet would: its whole card is to be released."""
    core = client.CoreV1Api(cluster.api)
    patch_pod_status(core, bound(cluster, name) or {}, {"phase": "Succeeded"})


def cores_taken(registry: CollectorRegistry) -> float:
    return (
        registry.get_sample_value(
            "gpushare_controller_card_allocated",
            {"node": "node-a", "device": "gpu-0", "capacity": "cores"},
        )
        or 0.0
    )


def owners(cluster: FakeCluster) -> list[str]:
    """Name the pod owning each claim left."""
    return [ref["name"] for c in claims(cluster) for ref in c["metadata"]["ownerReferences"]]


def no_loop_stalled(replica: Controller) -> None:
    assert {loop.name: loop.stalled() for loop in replica.loops()} == {
        loop.name: None for loop in replica.loops()
    }


@pytest.mark.parametrize(
    ("verb", "resource", "after"),
    [
        ("patch", "resourceclaims/status", True),  # the allocation stored, its answer lost
        ("patch", "resourceclaims", False),  # the commit (finalizer) swallowed
        ("patch", "pods", False),  # the gate removal swallowed
        ("patch", "pods", True),  # the pod ungated, its answer lost
    ],
    ids=["allocation-answer-lost", "commit-swallowed", "ungate-swallowed", "ungate-answer-lost"],
)
def test_a_write_whose_answer_never_comes_costs_the_allocator_one_timeout(
    work_dir: Path, verb: str, resource: str, after: bool
) -> None:
    """A hung write delays the pod by one timeout; the next pod and the accounting follow."""
    with harness(work_dir, node("node-a", 1)) as cluster, controller(cluster) as (replica, metrics):
        cluster.apply([template("whole"), gated_pod("first", "whole")])
        hang = cluster.server.faults.inject(
            verb=verb, resource=resource, hang=True, after=after, times=1
        )
        cluster.wait_for(lambda: bound(cluster, "first"), "the first pod", BOUND)
        assert hang.hits == 1
        cluster.wait_for(lambda: cores_taken(metrics) == 100, "the card counted as taken", BOUND)
        finish(cluster, "first")
        cluster.apply([gated_pod("second", "whole")])
        cluster.wait_for(lambda: bound(cluster, "second"), "the second pod", BOUND)
        cluster.wait_for(lambda: owners(cluster) == ["second"], "the first claim's release", BOUND)
        no_loop_stalled(replica)


def test_black_holed_connections_cost_the_controller_one_timeout(work_dir: Path) -> None:
    """After a partition of every open connection, a claim is released and a pod placed."""
    with harness(work_dir, node("node-a", 1)) as cluster, controller(cluster) as (replica, _):
        cluster.apply([template("whole"), gated_pod("first", "whole")])
        cluster.wait_for(lambda: bound(cluster, "first"), "the first pod", BOUND)
        # Every watch and pooled connection of the controller goes silent, nothing closes.
        assert cluster.server.blackhole(AGENT) >= len(replica.view.informers)
        finish(cluster, "first")
        cluster.apply([gated_pod("second", "whole")])
        pod = cluster.wait_for(lambda: bound(cluster, "second"), "the second pod", BOUND)
        assert pod["spec"]["nodeName"] == "node-a"
        cluster.wait_for(
            lambda: owners(cluster) == ["second"], "the first claim's release and deletion", BOUND
        )
        no_loop_stalled(replica)


def test_a_watch_that_never_sends_an_event_is_renewed(work_dir: Path) -> None:
    """Watches that hang from the start (headers, then nothing) cost one watch timeout."""
    with harness(work_dir, node("node-a", 1)) as cluster:
        cluster.server.bookmark_interval = 600
        hung = cluster.server.faults.inject(
            verb="watch", hang=True, when=lambda request: request.resource == "pods", times=1
        )
        with controller(cluster) as (replica, _):
            cluster.apply([template("whole"), gated_pod("first", "whole")])
            cluster.wait_for(lambda: bound(cluster, "first"), "the first pod", BOUND)
            assert hung.hits == 1
            no_loop_stalled(replica)
