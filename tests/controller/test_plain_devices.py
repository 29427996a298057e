"""Clusters without consumable capacity (1.34/1.35 as shipped): whole cards through both paths."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controller.kit import NAMES, node, slices_of
from controller.test_controller_e2e import (
    bound,
    claims,
    events_for,
    gated_pod,
    running,
    template,
)
from gpushare_simulator.harness.cluster import FakeCluster

from dra_driver.api.classes import default_device_classes
from dra_driver.nvml.inventory import Inventory
from dra_driver.publishing.slicesync import with_generation


@contextmanager
def plain_cluster(work_dir: Path, cards: int) -> Iterator[FakeCluster]:
    """Start a 1.35 fake cluster (gate off) whose one node publishes plain devices."""
    inventory = Inventory(nodes=(node("node-a", cards),))
    with FakeCluster(inventory, work_dir, kube_version="1.35", kubelets=False) as cluster:
        plain = slices_of(inventory.nodes, shared=False)
        cluster.apply([*default_device_classes(NAMES), *plain])
        yield cluster


def turn_the_gate_on(cluster: FakeCluster, cards: int) -> None:
    """Upgrade: the API server keeps the fields; the plugin republishes the cards shareable."""
    # The same devices, at the pool's next generation, as the plugin's re-check publishes them.
    cluster.server.app.admission.gates.enabled["DRAConsumableCapacity"] = True
    for slice_ in slices_of([node("node-a", cards)], shared=False):
        cluster.server.delete("resourceslices", None, slice_["metadata"]["name"])
    cluster.apply([with_generation(s, 2) for s in slices_of([node("node-a", cards)])])


def taken_devices(cluster: FakeCluster) -> list[str]:
    """Return the device of every allocation result, one entry per result."""
    return [
        result["device"]
        for claim in claims(cluster)
        for result in ((claim.get("status") or {}).get("allocation") or {})
        .get("devices", {})
        .get("results", [])
    ]


def test_the_controller_gives_whole_plain_cards_and_the_third_pod_waits(work_dir: Path) -> None:
    """Two gated pods get one plain card each, without shareID; a third waits with a reason."""
    with plain_cluster(work_dir, 2) as cluster, running(cluster):
        cluster.apply([template("whole"), gated_pod("a", "whole"), gated_pod("b", "whole")])
        for name in ("a", "b"):
            cluster.wait_for(lambda name=name: bound(cluster, name), f"pod {name} to be bound")
        devices = set()
        for claim in claims(cluster):
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert "shareID" not in result
            devices.add(result["device"])
        assert devices == {"gpu-0", "gpu-1"}
        cluster.apply([gated_pod("c", "whole")])
        cluster.wait_for(
            lambda: any(e["reason"] == "FailedAllocation" for e in events_for(cluster, "c")),
            "the third pod's FailedAllocation event",
        )
        assert sorted(taken_devices(cluster)) == ["gpu-0", "gpu-1"]  # no card given twice


def test_a_share_request_on_such_a_cluster_gets_a_whole_card(work_dir: Path) -> None:
    """The API server drops the capacity request, so a 30-core claim is a whole-card claim."""
    with plain_cluster(work_dir, 1) as cluster, running(cluster):
        cluster.apply([template("share", "30", "5Gi"), gated_pod("s", "share")])
        cluster.wait_for(lambda: bound(cluster, "s"), "the pod to be bound")
        (claim,) = claims(cluster)
        assert "capacity" not in claim["spec"]["devices"]["requests"][0]["exactly"]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["device"], "shareID" in result) == ("gpu-0", False)


def test_stock_kube_scheduler_allocates_plain_cards_beside_the_controller(work_dir: Path) -> None:
    """An ungated pod gets a plain card from kube-scheduler; the controller counts it as taken."""
    with plain_cluster(work_dir, 2) as cluster, running(cluster):
        cluster.apply([template("whole"), gated_pod("stock", "whole", gated=False)])
        cluster.wait_for(lambda: bound(cluster, "stock"), "the stock-scheduled pod")
        cluster.apply([gated_pod("ours", "whole")])
        cluster.wait_for(lambda: bound(cluster, "ours"), "our pod")
        cluster.apply([gated_pod("third", "whole")])
        cluster.wait_for(
            lambda: any(e["reason"] == "FailedAllocation" for e in events_for(cluster, "third")),
            "the third pod's FailedAllocation event",
        )
        taken = [
            c["status"]["allocation"]["devices"]["results"][0]["device"]
            for c in claims(cluster)
            if (c.get("status") or {}).get("allocation")
        ]
        assert sorted(taken) == ["gpu-0", "gpu-1"]


def test_turning_the_gate_on_keeps_whole_cards_and_shares_the_free_ones(work_dir: Path) -> None:
    """An upgrade turns the gate on: a card held whole stays held; shares go to the other card."""
    with plain_cluster(work_dir, 2) as cluster, running(cluster):
        cluster.apply([template("whole"), gated_pod("held", "whole")])
        cluster.wait_for(lambda: bound(cluster, "held"), "the whole-card pod")
        (before,) = claims(cluster)
        (held,) = before["status"]["allocation"]["devices"]["results"]
        turn_the_gate_on(cluster, 2)
        cluster.apply([template("share", "30", "5Gi"), gated_pod("s1", "share")])
        cluster.apply([gated_pod("s2", "share")])
        for name in ("s1", "s2"):
            cluster.wait_for(lambda name=name: bound(cluster, name), f"share pod {name}")
        after = {c["metadata"]["name"]: c for c in claims(cluster)}
        assert after[before["metadata"]["name"]]["status"] == before["status"]
        shares = [c for name, c in after.items() if name != before["metadata"]["name"]]
        for claim in shares:
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["shareID"]
            assert result["device"] != held["device"]
            assert result["consumedCapacity"] == {"cores": "30", "memory": "5Gi"}


def sized_template(name: str, cores: str, memory: str) -> dict[str, object]:
    """Return a template whose share's size is in its GpuShareConfig, not in capacity."""
    made = template(name)
    parameters = {
        "apiVersion": NAMES.config_api_version,
        "kind": NAMES.config_kind,
        "cores": cores,
        "memory": memory,
    }
    made["spec"]["spec"]["devices"]["config"] = [
        {"opaque": {"driver": NAMES.driver, "parameters": parameters}}
    ]
    return made


def test_config_sized_claims_share_one_plain_card(work_dir: Path) -> None:
    """Two 50-core pods share the one plain card; a third waits: the card is full."""
    with plain_cluster(work_dir, 1) as cluster, running(cluster):
        cluster.apply([sized_template("half", "50", "8Gi")])
        cluster.apply([gated_pod("a", "half"), gated_pod("b", "half")])
        for name in ("a", "b"):
            cluster.wait_for(lambda name=name: bound(cluster, name), f"pod {name} to be bound")
        for claim in claims(cluster):
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["device"] == "gpu-0"
            assert "shareID" not in result
            (entry,) = claim["status"]["allocation"]["devices"]["config"]
            assert entry["opaque"]["parameters"]["cores"] == "50"
        cluster.apply([gated_pod("c", "half")])
        cluster.wait_for(
            lambda: any(e["reason"] == "FailedAllocation" for e in events_for(cluster, "c")),
            "the third pod's FailedAllocation event",
        )
        assert taken_devices(cluster) == ["gpu-0", "gpu-0"]


def test_turning_the_gate_on_keeps_config_shares_and_fills_beside_them(work_dir: Path) -> None:
    """After the upgrade a config share keeps its card and size; new shares fill the rest."""
    with plain_cluster(work_dir, 1) as cluster, running(cluster):
        cluster.apply([sized_template("old", "40", "6Gi"), gated_pod("old", "old")])
        cluster.wait_for(lambda: bound(cluster, "old"), "the config-sized pod")
        (before,) = claims(cluster)
        turn_the_gate_on(cluster, 1)
        cluster.apply([template("new", "30", "5Gi"), gated_pod("new-1", "new")])
        cluster.apply([gated_pod("new-2", "new")])
        for name in ("new-1", "new-2"):
            cluster.wait_for(lambda name=name: bound(cluster, name), f"share {name} beside it")
        after = {c["metadata"]["name"]: c for c in claims(cluster)}
        assert after[before["metadata"]["name"]]["status"] == before["status"]
        for name, claim in after.items():
            if name != before["metadata"]["name"]:
                (result,) = claim["status"]["allocation"]["devices"]["results"]
                assert (result["device"], result["consumedCapacity"]) == (
                    "gpu-0",
                    {"cores": "30", "memory": "5Gi"},
                )
        # 100 - 40 - 2 x 30 = 0 cores left: the controller counts the old share by its size.
        cluster.apply([template("more", "1", "1Gi"), gated_pod("more", "more")])
        cluster.wait_for(
            lambda: any(e["reason"] == "FailedAllocation" for e in events_for(cluster, "more")),
            "the FailedAllocation of a share the full card cannot take",
        )


def test_after_the_upgrade_kube_scheduler_treats_an_old_config_share_as_the_whole_card(
    work_dir: Path,
) -> None:
    """An ungated pod finds the card taken whole, though by size a share of it is still free."""
    with plain_cluster(work_dir, 1) as cluster, running(cluster):
        cluster.apply([sized_template("old", "40", "6Gi"), gated_pod("old", "old")])
        cluster.wait_for(lambda: bound(cluster, "old"), "the config-sized pod")
        turn_the_gate_on(cluster, 1)
        cluster.apply([template("small", "10", "1Gi"), gated_pod("stock", "small", gated=False)])
        cluster.wait_for(
            lambda: any(e["reason"] == "FailedScheduling" for e in events_for(cluster, "stock")),
            "kube-scheduler's FailedScheduling for the ungated pod",
        )
        assert bound(cluster, "stock") is None
        cluster.apply([gated_pod("ours", "small")])
        cluster.wait_for(lambda: bound(cluster, "ours"), "the gated pod, placed by the controller")
