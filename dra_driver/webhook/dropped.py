"""Capacity requests that the API server would drop: clusters without consumable capacity.

On Kubernetes 1.34 and 1.35 as shipped (``DRAConsumableCapacity`` off) the API server silently
removes ``capacity`` from a claim's requests when it stores the claim, so a claim for 30 cores
and 5Gi becomes a claim for a whole card. The validating webhook only ever sees the claim
after that; this check runs in the mutating webhook, which kube-apiserver calls before, and
refuses such a request instead of letting it turn into something else. Whether the cluster
has consumable capacity is read from our published cards: the kubelet plugin publishes plain
devices exactly when its API server drops the fields. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dra_driver.api import DriverNames
from dra_driver.api.errors import Reason
from dra_driver.structured.classes import class_driver, device_entries
from dra_driver.webhook.capacity import Limits

Object = Mapping[str, Any]

GATE: Final = "DRAConsumableCapacity"


def dropped_capacity(
    spec: Object,
    *,
    path: str,
    names: DriverNames,
    classes: Mapping[str, Object],
    limits: Limits,
) -> list[str]:
    """Return an error per request of ours with ``capacity`` where every card is whole-only.

    Nothing is refused while the cluster's cards are unknown or any is shareable.
    """
    if limits.shareable is not False:
        return []
    errors = []
    for relative, _, fields in device_entries(spec):
        device_class = classes.get(str(fields.get("deviceClassName", "")))
        if device_class is None or class_driver(device_class) != names.driver:
            continue
        if (fields.get("capacity") or {}).get("requests"):
            errors.append(
                f"{path}.devices.{relative}.capacity: {Reason.FORBIDDEN}: this cluster's API "
                f"server drops capacity requests (the {GATE} feature gate is off), so the "
                f"claim would silently get a whole {names.driver} card; enable {GATE} on "
                "kube-apiserver, kube-scheduler and the kubelets to share cards, or remove "
                "the capacity request to ask for a whole card"
            )
    return errors
