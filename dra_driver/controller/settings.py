"""Settings of the allocation controller (``gpushare-dra controller``)."""

from __future__ import annotations

import dataclasses

from dra_driver.api import Placement
from dra_driver.settings import flag


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    """Allocation controller."""

    gpu_placement: Placement = flag(
        Placement.BINPACK,
        "default card choice on a node for claims whose config does not set placement",
    )
    node_placement: Placement = flag(Placement.BINPACK, "choice among the nodes that fit a pod")
    leader_elect: bool = flag(True, "elect one active replica through a coordination Lease")
    leader_election_namespace: str = flag(
        "gpushare", "namespace of the leader-election Lease (usually the release namespace)"
    )
