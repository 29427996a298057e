"""Settings of the allocation controller (``gpushare-dra controller``)."""

from __future__ import annotations

import dataclasses

from dra_driver.api import Placement
from dra_driver.settings import flag


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    """Allocation controller."""

    gpu_placement_online: Placement = flag(
        Placement.SPREAD,
        "card choice on a node for online shares whose config does not set placement "
        "(spread keeps latency-sensitive work apart)",
    )
    gpu_placement_offline: Placement = flag(
        Placement.BINPACK,
        "card choice on a node for offline shares whose config does not set placement "
        "(binpack fills cards and leaves whole cards free)",
    )
    node_placement: Placement = flag(Placement.BINPACK, "choice among the nodes that fit a pod")
    share_whole_only_cards: bool = flag(
        True,
        "on cards a kubelet plugin publishes whole-only (its API server has no consumable "
        "capacity), place several claims sized by GpuShareConfig cores/memory by the "
        "controller's own accounting; false: such cards are only handed out whole",
    )
    preemption: bool = flag(
        True,
        "evict offline pods (through the Eviction API) when an online pod fits on no card "
        "until they are gone; false: online pods wait like any other",
    )
    leader_elect: bool = flag(True, "elect one active replica through a coordination Lease")
    leader_election_namespace: str = flag(
        "gpushare", "namespace of the leader-election Lease (usually the release namespace)"
    )
    leader_election_identity: str = flag(
        "", "this replica's name in the Lease; empty: the host name (the pod name in a cluster)"
    )
    lease_duration: int = flag(15, "seconds a leader's Lease is valid without renewal")
    renew_deadline: int = flag(10, "seconds the leader keeps retrying a renewal before it quits")
    retry_period: int = flag(2, "seconds between leader-election attempts")
    resync_seconds: float = flag(
        30.0, "how often every gated pod and our claims are looked at again, events or not"
    )
