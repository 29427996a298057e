"""DeviceTaintRules applied to the devices of ResourceSlices, as kube-scheduler sees them.

A DeviceTaintRule (``resource.k8s.io``: ``v1alpha3`` up to 1.35, ``v1beta2`` in 1.36, ``v1``
from 1.37) taints every device its ``spec.deviceSelector`` matches: ``driver``, ``pool`` and
``device``, each optional, an absent one matching anything. kube-scheduler's allocator adds a
rule's taint to the taints the device carries in its slice and then treats both alike, so
this driver's engine does too: :func:`with_rule_taints` returns the slices as the allocator
should read them. Pure: no client, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object


@dataclasses.dataclass(frozen=True)
class RuleTaint:
    """One rule's taint and which devices it applies to (``None``: any)."""

    rule: str
    taint: Object
    driver: str | None
    pool: str | None
    device: str | None

    def applies(self, driver: str, pool: str, device: str) -> bool:
        """Whether the rule's selector matches the device ``driver``/``pool``/``device``."""
        return all(
            wanted is None or wanted == actual
            for wanted, actual in ((self.driver, driver), (self.pool, pool), (self.device, device))
        )


def _optional(selector: Object, field: str) -> str | None:
    value = selector.get(field)
    return value if isinstance(value, str) and value else None


def rule_taints(rules: Iterable[Object], driver: str) -> list[RuleTaint]:
    """Read the rules that can taint devices of ``driver``, in name order.

    A rule without a taint (the API server refuses those; a half-written cache entry is not
    worth failing an allocation over) or for another driver is left out.
    """
    found = []
    for rule in rules:
        spec = rule.get("spec") if isinstance(rule, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("taint"), dict):
            continue
        selector = spec.get("deviceSelector")
        selector = selector if isinstance(selector, dict) else {}
        wanted_driver = _optional(selector, "driver")
        if wanted_driver is not None and wanted_driver != driver:
            continue
        name = str(objects.metadata(rule).get("name") or "")
        found.append(
            RuleTaint(
                rule=name,
                taint=spec["taint"],
                driver=wanted_driver,
                pool=_optional(selector, "pool"),
                device=_optional(selector, "device"),
            )
        )
    return sorted(found, key=lambda r: r.rule)


def with_rule_taints(slices: Sequence[Object], rules: Sequence[RuleTaint]) -> list[Object]:
    """Return the slices with each rule's taint added to the devices it selects.

    Slices and devices no rule touches are returned as they are (the same objects); touched
    ones are copied, so the caller's cache is never changed.
    """
    if not rules:
        return list(slices)
    out = []
    for slice_ in slices:
        spec = slice_.get("spec") if isinstance(slice_, dict) else None
        if not isinstance(spec, dict):
            out.append(slice_)
            continue
        driver = str(spec.get("driver") or "")
        pool = str((spec.get("pool") or {}).get("name") or "")
        devices = spec.get("devices")
        changed = False
        tainted = []
        for device in devices if isinstance(devices, list) else []:
            name = str(device.get("name") or "") if isinstance(device, dict) else ""
            extra = [r.taint for r in rules if r.applies(driver, pool, name)]
            if extra:
                changed = True
                tainted.append({**device, "taints": [*(device.get("taints") or []), *extra]})
            else:
                tainted.append(device)
        out.append({**slice_, "spec": {**spec, "devices": tainted}} if changed else slice_)
    return out
