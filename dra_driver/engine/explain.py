"""Reasons a human can act on when a pod's claims fit nowhere.

kube-scheduler style ("0/4 nodes are available: ...") with nodes grouped by reason, plus, for a
request that no card could hold, the closest card in the cluster and what it has free: that
tells the user whether to ask for less, wait, or add cards.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping
from fractions import Fraction

from dra_driver.engine.devices import Device
from dra_driver.engine.load import Model
from dra_driver.engine.requests import Alternative
from dra_driver.k8s.quantity import QuantityFormat, format_quantity, quantity_format
from dra_driver.structured.consumable import Capacity


def amount(capacity: Capacity, value: Fraction) -> str:
    """Format an amount of one capacity the way its slice value is written (``9Gi``, ``40``)."""
    fmt = quantity_format(capacity.text)
    if fmt is QuantityFormat.BINARY and value % 1024 == 0 and value >= 1024**2:
        return format_quantity(value, QuantityFormat.BINARY)
    return format_quantity(value, fmt)


def describe(capacities: Mapping[str, Capacity], amounts: Mapping[str, Fraction]) -> str:
    """Return ``"9Gi memory, 100 cores"`` for the named amounts."""
    return ", ".join(
        f"{amount(capacities[name], value)} {name}"
        for name, value in sorted(amounts.items())
        if name in capacities
    )


def wanted_text(alternative: Alternative, device: Device, wanted: Mapping[str, Fraction]) -> str:
    """Say what one share of ``alternative`` needs: ``card with 12Gi memory, 30 cores free``.

    A whole-only card that takes config-sized shares is explained by amounts like a shareable
    one: to a user a whole card there is a share of everything, as it is elsewhere.
    """
    if alternative.exclusive or not (device.model.shares(alternative.sized) or device.plain):
        return "idle card for a whole-card share"
    return _share_text(device.model, tuple(sorted(wanted.items())))


@functools.lru_cache(maxsize=1024)
def _share_text(model: Model, wanted: tuple[tuple[str, Fraction], ...]) -> str:
    # A failed decision explains every node, and most nodes share a few card models.
    return f"card with {describe(model.capacities, dict(wanted))} free"


def closest_text(device: Device, free: Mapping[str, Fraction] | None) -> str:
    """Say what the closest card has: ``node-3/gpu-0 has 9Gi memory, 100 cores free``."""
    if free is None:
        return f"{device.label} is used whole by another claim"
    return f"{device.label} has {describe(device.capacities, free)} free"


def summarize(total_nodes: int, reasons: Iterable[str]) -> str:
    """Return ``0/N nodes are available: 2 nodes <reason>; 1 node <reason>``."""
    counts = Counter(reasons)
    if total_nodes == 0:
        return "0/0 nodes are available: the cluster has no nodes"
    parts = [
        f"{count} node{'s' if count != 1 else ''}: {reason}"
        for reason, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    return f"0/{total_nodes} nodes are available: " + "; ".join(parts)


def unusable_text(pools: dict[str, str]) -> str:
    """Say which pools of a node give no device and why: ``pool a is being updated``."""
    return "; ".join(f"pool {pool} {why}" for pool, why in sorted(pools.items()))
