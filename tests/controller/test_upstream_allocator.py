"""kube-scheduler's allocator test table, ported: the engine must decide as upstream does.

Cases come from ``allocator_testing.go`` of k8s.io/dynamic-resource-allocation (kube-scheduler
1.36) and keep their names there. Cases that need what a single node-local driver never sees
are listed in ``LEFT_OUT`` with the reason. Every ported case passes: where the engine once
disagreed, it was changed to decide as upstream does.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

import pytest
from controller.upstream_cases import CASES as CASES_1
from controller.upstream_cases import Case, D, Object, Result
from controller.upstream_cases_2 import CASES as CASES_2
from controller.upstream_cases_3 import CASES as CASES_3
from controller.upstream_cases_3 import LEFT_OUT

from dra_driver.api import DriverNames
from dra_driver.engine import Placed, Policy, Snapshot, place_pod
from dra_driver.k8s.quantity import parse_quantity

NAMES = DriverNames.for_driver(D)
CASES: list[Case] = [*CASES_1, *CASES_2, *CASES_3]


def _node(case: Case) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": case.node,
            "labels": {"region": case.region, "planet": "earth"},
        },
        "spec": {},
    }


def _claims(case: Case) -> list[Object]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": c["name"],
                "namespace": "default",
                # Upstream gives two claims one name in places; UIDs keep them apart.
                "uid": f"00000000-0000-4000-8000-{index:012d}",
                "resourceVersion": "1",
            },
            "spec": {"devices": c["devices"]},
        }
        for index, c in enumerate(case.claims)
    ]


def _used(case: Case) -> list[Object]:
    """Allocated claims holding ``case.used``, one claim per device as upstream counts them."""
    out = []
    for index, used in enumerate(case.used):
        result: Object = {
            "request": "req-0",
            "driver": D,
            "pool": used.pool,
            "device": used.device,
        }
        if used.consumed is not None:
            result["shareID"] = f"aaaaaaaa-aaaa-4aaa-8aaa-{index:012d}"
            result["consumedCapacity"] = dict(used.consumed)
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": f"used-{index}",
                    "namespace": "default",
                    "uid": f"99999999-0000-4000-8000-{index:012d}",
                },
                "spec": {"devices": {"requests": []}},
                "status": {
                    "allocation": {
                        "devices": {"results": [result]},
                        "nodeSelector": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": [case.node],
                                        }
                                    ]
                                }
                            ]
                        },
                    }
                },
            }
        )
    return out


def _decide(case: Case) -> Any:
    snapshot = Snapshot.build(
        NAMES,
        nodes=[_node(case)],
        slices=case.slices,
        classes=case.classes,
        claims=_used(case),
    )
    counter = itertools.count(1)
    return place_pod(
        snapshot,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pod", "namespace": "default", "uid": "pod-uid"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
        _claims(case),
        Policy(),
        share_id=lambda: f"11111111-2222-4333-8444-{next(counter):012d}",
    )


def _results(placed: Placed) -> list[list[Result]]:
    return [
        sorted((res["request"], res["pool"], res["device"]) for res in allocation.results)
        for allocation in placed.claims
    ]


def _raw_devices(case: Case) -> dict[tuple[str, str], Object]:
    return {
        (s["spec"]["pool"]["name"], d["name"]): d
        for s in case.slices
        if s["spec"]["driver"] == D
        for d in s["spec"]["devices"]
    }


def _attribute(device: Object, name: str) -> object:
    short = name.removeprefix(f"{D}/")
    value = (device.get("attributes") or {}).get(short)
    return None if value is None else next(iter(value.items()))


def _covers(constraint: Object, request: str) -> bool:
    names = constraint.get("requests")
    return not names or request in names or request.split("/", 1)[0] in names


def _constraint_violations(case: Case, placed: Placed) -> Iterator[str]:
    """Say which claim constraints the engine's answer breaks."""
    raw = _raw_devices(case)
    for index, allocation in enumerate(placed.claims):
        for constraint in case.claims[index]["devices"].get("constraints", []):
            attribute = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
            values = [
                _attribute(raw[(res["pool"], res["device"])], attribute)
                for res in allocation.results
                if _covers(constraint, res["request"])
            ]
            if "matchAttribute" in constraint and (None in values or len(set(values)) > 1):
                yield f"claim {index}: matchAttribute {attribute} broken: {values}"
            if "distinctAttribute" in constraint and len(set(values)) < len(values):
                yield f"claim {index}: distinctAttribute {attribute} broken: {values}"


def _usage_violations(case: Case, placed: Placed) -> Iterator[str]:
    """Say which device the engine's answer (with ``case.used``) uses twice or overfills."""
    raw = _raw_devices(case)
    whole: Counter[tuple[str, str]] = Counter()
    consumed: dict[tuple[str, str], dict[str, Fraction]] = {}
    results = [(u.pool, u.device, u.consumed) for u in case.used] + [
        (res["pool"], res["device"], res.get("consumedCapacity"))
        for allocation in placed.claims
        for res in allocation.results
    ]
    for pool, name, share in results:
        if (pool, name) not in raw:
            yield f"no such device {(pool, name)}"
        elif share is None:
            whole[(pool, name)] += 1
        else:
            amounts = consumed.setdefault((pool, name), {})
            for capacity, amount in _amounts(share).items():
                amounts[capacity] = amounts.get(capacity, Fraction(0)) + amount
    for key, count in whole.items():
        if count > 1 or key in consumed:
            yield f"device {key} used by more than one claim or request"
    for key, amounts in consumed.items():
        for capacity, amount in amounts.items():
            total = parse_quantity(raw[key]["capacity"][capacity]["value"])
            if amount > total:
                yield f"device {key}: {capacity} {amount} consumed of {total}"


def _violations(case: Case, placed: Placed) -> Iterator[str]:
    """Say how the engine's answer breaks what any valid answer to ``case`` must hold."""
    assert case.expect is not None
    for index, (allocation, expected) in enumerate(zip(placed.claims, case.expect, strict=True)):
        got = Counter(res["request"] for res in allocation.results)
        if got != Counter(e[0] for e in expected):
            yield f"claim {index}: requests {dict(got)}, upstream {[e[0] for e in expected]}"
    yield from _constraint_violations(case, placed)
    yield from _usage_violations(case, placed)


def _amounts(consumed: Any) -> dict[str, Fraction]:
    return {name: parse_quantity(str(amount)) for name, amount in dict(consumed).items()}


def _shares(placed: Placed, expect: Sequence[Sequence[Result]]) -> list[list[Any]]:
    """Return, per claim, the shares (results with a shareID) whose consumption upstream states."""
    out = []
    for allocation, expected in zip(placed.claims, expect, strict=True):
        stated = {e[:3] for e in expected if len(e) > 3}
        shares = []
        for res in allocation.results:
            key = (res["request"], res["pool"], res["device"])
            if key in stated:
                # A share always has a shareID; upstream leaves consumedCapacity out when the
                # device has no capacities.
                assert res.get("shareID"), res
                shares.append((key, _amounts(res.get("consumedCapacity") or {})))
        out.append(sorted(shares, key=lambda share: share[0]))
    return out


def _tolerations(case: Case, placed: Placed) -> list[list[Any]]:
    """Return, per claim, each result's tolerations beside those its (sub-)request lists."""
    out = []
    for spec, allocation in zip(case.claims, placed.claims, strict=True):
        wanted = {}
        for request in spec["devices"]["requests"]:
            if "exactly" in request:
                wanted[request["name"]] = request["exactly"].get("tolerations", [])
            for alternative in request.get("firstAvailable", []):
                name = f"{request['name']}/{alternative['name']}"
                wanted[name] = alternative.get("tolerations", [])
        out.append(
            [(res.get("tolerations", []), wanted[res["request"]]) for res in allocation.results]
        )
    return out


def _configs(placed: Placed) -> list[list[tuple[str, list[str]]]]:
    return [
        [(entry["source"], list(entry.get("requests") or [])) for entry in allocation.config]
        for allocation in placed.claims
    ]


def test_left_out_cases_are_not_ported() -> None:
    """Every upstream case is either ported or left out with a reason, never both."""
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))
    assert not set(names) & set(LEFT_OUT)
    assert all(reason.strip() for reason in LEFT_OUT.values())


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_engine_decides_as_upstream(case: Case) -> None:
    """The engine allocates what kube-scheduler's allocator allocates, or fails where it fails."""
    decision = _decide(case)
    if case.expect is None:
        assert not isinstance(decision, Placed), _results(decision)
        return
    assert isinstance(decision, Placed), decision.reason
    assert len(decision.claims) == len(case.expect)
    if case.any_valid:
        assert list(_violations(case, decision)) == []
    else:
        assert _results(decision) == [sorted(e[:3] for e in results) for results in case.expect]
        assert _shares(decision, case.expect) == [
            sorted(((e[:3], _amounts(e[3])) for e in results if len(e) > 3), key=lambda x: x[0])
            for results in case.expect
        ]
    # Upstream copies a request's tolerations into each of its results.
    for pairs in _tolerations(case, decision):
        assert all(got == wanted for got, wanted in pairs), pairs
    # An admin-access request's results say so, and carry no share of the card.
    for spec, allocation in zip(case.claims, decision.claims, strict=True):
        admin = {
            r["name"]
            for r in spec["devices"]["requests"]
            if (r.get("exactly") or {}).get("adminAccess")
        }
        for res in allocation.results:
            assert bool(res.get("adminAccess")) == (res["request"] in admin), res
            assert not (res.get("adminAccess") and "consumedCapacity" in res), res
    if case.configs is not None:
        assert _configs(decision) == [
            [(source, list(requests)) for source, requests in entries] for entries in case.configs
        ]
