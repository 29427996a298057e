"""Capacity requests that the API server would drop: clusters without consumable capacity.

On Kubernetes 1.34 and 1.35 as shipped (``DRAConsumableCapacity`` off) the API server silently
removes ``capacity`` from a claim's requests when it stores the claim, so a claim for 30 cores
and 5Gi becomes a claim for a whole card. The validating webhook only ever sees the claim
after that; this check runs in the mutating webhook, which kube-apiserver calls before, and
refuses such a request instead of letting it turn into something else. Whether the cluster
has consumable capacity is read from our published cards: the kubelet plugin publishes plain
devices exactly when its API server drops the fields. The refusal says how to share cards there
all the same: the claim's GpuShareConfig carries ``cores`` and ``memory``, which the API server
keeps, and the controller sizes shares by them. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dra_driver.api import DriverNames
from dra_driver.api.errors import Reason, quote
from dra_driver.api.fields import CORES, MEMORY
from dra_driver.k8s.objects import ObjectView
from dra_driver.structured.classes import class_driver, device_entries
from dra_driver.structured.configshares import config_size
from dra_driver.validation.capacity import Limits

GATE: Final = "DRAConsumableCapacity"


def dropped_capacity(
    spec: ObjectView,
    *,
    path: str,
    names: DriverNames,
    classes: Mapping[str, ObjectView],
    limits: Limits,
) -> list[str]:
    """Return an error per request of ours with ``capacity`` where every card is whole-only.

    Nothing is refused while the cluster's cards are unknown or any is shareable.
    """
    if limits.shareable is not False:
        return []
    errors = []
    for relative, result, fields in device_entries(spec):
        device_class = classes.get(str(fields.get("deviceClassName", "")))
        if device_class is None or class_driver(device_class) != names.driver:
            continue
        requests = (fields.get("capacity") or {}).get("requests")
        if requests:
            errors.append(
                f"{path}.devices.{relative}.capacity: {Reason.FORBIDDEN}: this cluster's API "
                f"server drops capacity requests (the {GATE} feature gate is off), so the "
                f"claim would silently get a whole {names.driver} card; to share cards, give "
                f"the share's size in the claim's GpuShareConfig for request {quote(result)} "
                f"instead ({_config_sizes(requests)}), or enable {GATE} on kube-apiserver, "
                "kube-scheduler and the kubelets; to ask for a whole card, remove the capacity "
                "request"
            )
    return errors


# What to write where a request's amount has no exact config equivalent (12.5 cores, 1536Ki).
_GENERIC: Final = {
    CORES: f"{CORES}: <per cent of the card's SMs, 0 to 100>",
    MEMORY: f"{MEMORY}: <a whole number of Mi, Gi or Ti, such as 5Gi>",
}


def _config_sizes(requests: Mapping[str, Any]) -> str:
    """Word the request's amounts as config fields (``cores: 30, memory: 5Gi``)."""
    asked = [name for name in (CORES, MEMORY) if name in requests] or [CORES, MEMORY]
    return ", ".join(_config_size(name, str(requests.get(name))) for name in asked)


def _config_size(name: str, text: str) -> str:
    """Return ``name: value`` as the config would take it, or what to write in general."""
    value = config_size(name, text)
    return _GENERIC[name] if value is None else f"{name}: {value}"
