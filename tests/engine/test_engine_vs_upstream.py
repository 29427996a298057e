"""The engine against kube-scheduler's rules (the oracle in upstream_rules) on random nodes."""

from __future__ import annotations

import copy
from typing import Any

from controller.kit import DRIVER, NAMES, card, claim, cluster, node, pod, share_ids, slices_of
from controller.upstream_rules import allocate, gather, judge
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from dra_driver.api.classes import default_device_classes
from dra_driver.engine import Placed, Policy, place_pod

Object = dict[str, Any]
CLASSES = {c["metadata"]["name"]: c for c in default_device_classes(NAMES)}
X = f"{DRIVER}/x"

cards = st.lists(
    st.fixed_dictionaries(
        {
            "gib": st.sampled_from([8, 16]),
            "shared": st.sampled_from([True, True, True, False]),
            "x": st.sampled_from(
                [
                    None,
                    {"int": 1},
                    {"int": 2},
                    {"bool": True},
                    {"string": "1"},
                    {"version": "1.0.0"},
                ]
            ),
        }
    ),
    min_size=1,
    max_size=4,
)
layouts = st.sampled_from(["one", "one", "split", "incomplete", "duplicate"])
earlier = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from([10, 30, 50]), st.sampled_from([1, 2, 4])),
    max_size=2,
)
entries = st.fixed_dictionaries(
    {
        "all": st.sampled_from([False, False, False, True]),
        "count": st.integers(1, 2),
        "cores": st.sampled_from([None, "10", "30", "60", "100"]),
        "memory": st.sampled_from([None, "1Gi", "4Gi", "9Gi", "20Gi"]),
        "selector": st.sampled_from(
            [
                None,
                None,
                f'device.attributes["{DRIVER}"].index < 2',
                f'device.capacity["{DRIVER}"].memory.compareTo(quantity("10Gi")) > 0',
            ]
        ),
    }
)
requests = st.lists(
    st.one_of(
        st.tuples(st.just("exactly"), entries),
        st.tuples(st.just("firstAvailable"), st.lists(entries, min_size=2, max_size=2)),
    ),
    min_size=1,
    max_size=2,
)
constraints = st.sampled_from([None, "matchAttribute", "distinctAttribute"])


def slices_for(specs: list[Object], layout: str) -> list[Object]:
    """Return node ``n``'s slices for the cards, laid out in one pool as asked."""
    (base,) = slices_of(
        [node("n", [card(i, f"{c['gib']}Gi", node="n") for i, c in enumerate(specs)])]
    )
    devices = base["spec"]["devices"]
    for device, spec in zip(devices, specs, strict=True):
        if not spec["shared"]:
            del device["allowMultipleAllocations"]
        if spec["x"] is not None:
            device["attributes"]["x"] = spec["x"]
    if layout == "duplicate":
        devices.append(copy.deepcopy(devices[0]))
    if layout in ("one", "duplicate") or len(devices) < 2:
        return [base]
    second = copy.deepcopy(base)
    second["metadata"]["name"] = "n-slice-1"
    base["spec"]["devices"], second["spec"]["devices"] = devices[:1], devices[1:]
    for slice_ in (base, second):
        slice_["spec"]["pool"]["resourceSliceCount"] = 2
    return [base] if layout == "incomplete" else [base, second]


def earlier_claims(specs: list[Object], shares: list[tuple[int, int, int]]) -> list[Object]:
    """Return allocated claims holding small shares of shared cards."""
    made = []
    for number, (index, cores, gib) in enumerate(shares):
        if index >= len(specs) or not specs[index]["shared"]:
            continue
        result = {
            "request": "gpu",
            "driver": DRIVER,
            "pool": "n",
            "device": f"gpu-{index}",
            "shareID": f"00000000-0000-4000-8000-{number:012d}",
            "consumedCapacity": {"cores": str(cores), "memory": f"{gib}Gi"},
        }
        held = claim(f"earlier-{number}")
        held["status"] = {"allocation": {"devices": {"results": [result], "config": []}}}
        made.append(held)
    return made


def entry_of(name: str, spec: Object) -> Object:
    """Return a request entry (``exactly`` or a sub-request) from a drawn spec."""
    entry: Object = {"deviceClassName": NAMES.default_device_class}
    if spec["all"]:
        entry["allocationMode"] = "All"
    else:
        entry["count"] = spec["count"]
    capacity = {k: spec[k] for k in ("cores", "memory") if spec[k] is not None}
    if capacity:
        entry["capacity"] = {"requests": capacity}
    if spec["selector"] is not None:
        entry["selectors"] = [{"cel": {"expression": spec["selector"]}}]
    return {"name": name, **entry}


def claim_of(drawn: list[tuple[str, Any]], constraint: str | None) -> Object:
    """Return the claim the drawn requests and constraint describe."""
    made = []
    for index, (kind, spec) in enumerate(drawn):
        name = f"r{index}"
        if kind == "exactly":
            entry = entry_of(name, spec)
            made.append({"name": entry.pop("name"), "exactly": entry})
        else:
            subs = [entry_of(f"s{i}", sub) for i, sub in enumerate(spec)]
            made.append({"name": name, "firstAvailable": subs})
    wanted = claim("wanted", *made)
    if constraint is not None:
        wanted["spec"]["devices"]["constraints"] = [{constraint: X}]
    return wanted


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cards, layouts, earlier, requests, constraints)
@example(  # All over a shared card with room and a full one: the full one is left out
    [{"gib": 8, "shared": True, "x": None}, {"gib": 8, "shared": True, "x": None}],
    "one",
    [(0, 50, 4), (0, 50, 4)],
    [("exactly", {"all": True, "count": 1, "cores": "10", "memory": "1Gi", "selector": None})],
    None,
)
@example(  # Upstream's first card for r0 is not the 16Gi one, so r1 gets its first choice
    [{"gib": 8, "shared": True, "x": None}] * 3 + [{"gib": 16, "shared": True, "x": None}],
    "one",
    [],
    [
        ("exactly", {"all": False, "count": 1, "cores": None, "memory": "1Gi", "selector": None}),
        (
            "firstAvailable",
            [
                {
                    "all": False,
                    "count": 1,
                    "cores": None,
                    "memory": None,
                    "selector": 'device.capacity["gpushare.dra.dev"].memory'
                    '.compareTo(quantity("10Gi")) > 0',
                },
                {"all": False, "count": 1, "cores": None, "memory": None, "selector": None},
            ],
        ),
    ],
    None,
)
def test_engine_and_upstream_agree_on_one_claim(specs, layout, shares, drawn, constraint):
    """Upstream allocates iff the engine does, accepts its answer; no later alternative taken."""
    slices = slices_for(specs, layout)
    held = earlier_claims(specs, shares)
    wanted = claim_of(drawn, constraint)
    snapshot = cluster(node("n", 0), claims=held, slices=slices)
    decision = place_pod(snapshot, pod(), [wanted], Policy(), share_id=share_ids())
    offered = gather(DRIVER, "n", slices, CLASSES, held)
    found = allocate(offered, wanted)
    event("allocated" if found is not None else "not allocatable")
    if not isinstance(decision, Placed):
        assert found is None, (decision.reason, found)
        return
    assert found is not None, decision
    results = decision.claims[0].results
    assert judge(offered, wanted, results) is None
    requests_ = wanted["spec"]["devices"]["requests"]
    chosen = tuple(
        next(
            i
            for i, sub in enumerate(r.get("firstAvailable") or [r])
            if any(
                res["request"] in (r["name"], f"{r['name']}/{sub.get('name')}") for res in results
            )
        )
        for r in requests_
    )
    # Upstream walks devices in slice order and keeps its first solution; the engine ranks
    # cards by policy but prefers earlier firstAvailable alternatives over any ranking.
    assert chosen <= found.alternatives
