"""The allocation engine: pure functions from a cluster snapshot to allocations or reasons."""

from dra_driver.engine.devices import Device
from dra_driver.engine.place import (
    ClaimAllocation,
    Placed,
    Unplaceable,
    node_selector,
    place_pod,
)
from dra_driver.engine.requests import claim_key, class_names, uses_driver
from dra_driver.engine.scoring import Policy
from dra_driver.engine.snapshot import Snapshot

__all__ = [
    "ClaimAllocation",
    "Device",
    "Placed",
    "Policy",
    "Snapshot",
    "Unplaceable",
    "claim_key",
    "class_names",
    "node_selector",
    "place_pod",
    "uses_driver",
]
