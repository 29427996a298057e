"""DeviceTaintRules taint the devices their selector matches, as kube-scheduler reads slices."""

from __future__ import annotations

from typing import Any

from dra_driver.structured.taintrules import rule_taints, with_rule_taints

Object = dict[str, Any]
DRIVER = "gpushare.dra.dev"
XID = {"key": "example.com/xid", "value": "79", "effect": "NoSchedule"}


def rule(name: str, taint: Object | None = XID, **selector: str) -> Object:
    """Return a DeviceTaintRule selecting ``selector`` (driver, pool, device)."""
    spec: Object = {"deviceSelector": selector}
    if taint is not None:
        spec["taint"] = taint
    return {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def slice_(pool: str, *devices: str, driver: str = DRIVER) -> Object:
    """Return a slice of ``pool`` listing ``devices`` (gpu-0 already tainted by its plugin)."""
    listed = [{"name": d} for d in devices]
    for device in listed:
        if device["name"] == "gpu-0":
            device["taints"] = [{"key": "own", "effect": "NoExecute"}]
    return {"spec": {"driver": driver, "pool": {"name": pool}, "devices": listed}}


def taints(slices: list[Object]) -> dict[tuple[str, str], list[str]]:
    """Map (pool, device) to the keys of its taints."""
    return {
        (s["spec"]["pool"]["name"], d["name"]): [t["key"] for t in d.get("taints") or []]
        for s in slices
        for d in s["spec"]["devices"]
    }


def test_each_selector_field_narrows_and_an_absent_one_matches_any() -> None:
    """driver/pool/device select; the rule's taint comes after the slice's own taints."""
    slices = [slice_("node-1", "gpu-0", "gpu-1"), slice_("node-2", "gpu-0")]
    every = {("node-1", "gpu-0"), ("node-1", "gpu-1"), ("node-2", "gpu-0")}
    cases = {
        "all": ({}, every),
        "driver": ({"driver": DRIVER}, every),
        "pool": ({"pool": "node-1"}, {("node-1", "gpu-0"), ("node-1", "gpu-1")}),
        "device": ({"device": "gpu-0"}, {("node-1", "gpu-0"), ("node-2", "gpu-0")}),
        "both": ({"pool": "node-2", "device": "gpu-0"}, {("node-2", "gpu-0")}),
    }  # fmt: skip
    for name, (selector, wanted) in cases.items():
        out = taints(with_rule_taints(slices, rule_taints([rule(name, **selector)], DRIVER)))
        assert {key for key, found in out.items() if XID["key"] in found} == wanted, name
    out = taints(with_rule_taints(slices, rule_taints([rule("pool", pool="node-1")], DRIVER)))
    assert out[("node-1", "gpu-0")] == ["own", XID["key"]]


def test_rules_for_other_drivers_or_without_a_taint_change_nothing() -> None:
    """A rule naming another driver, or carrying no taint, taints none of ours."""
    slices = [slice_("node-1", "gpu-0", "gpu-1")]
    ignored = [rule("other", driver="example.com/nic"), rule("empty", taint=None)]
    rules = rule_taints(ignored, DRIVER)
    assert rules == []
    assert with_rule_taints(slices, rules) == slices


def test_the_callers_slices_are_never_changed() -> None:
    """Tainted devices are copies; untouched slices come back as the same objects."""
    touched, untouched = slice_("node-1", "gpu-1"), slice_("node-2", "gpu-1")
    before = repr(touched)
    out = with_rule_taints([touched, untouched], rule_taints([rule("r", pool="node-1")], DRIVER))
    assert repr(touched) == before
    assert out[1] is untouched
    assert out[0]["spec"]["devices"][0]["taints"] == [XID]
