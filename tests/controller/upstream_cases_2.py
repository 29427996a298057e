"""Ported allocator cases, second part: bad claims, prioritized lists, taints, capacity."""

from __future__ import annotations

from controller.upstream_cases import (
    CLASS_A,
    RANGE,
    Case,
    Used,
    device,
    device_class,
    devices,
    first,
    match,
    mem_at_least,
    multi_class,
    one,
    req,
    slice_,
    sub,
    valid_values,
)
from controller.upstream_cases import NODE1 as N1
from controller.upstream_cases import NODE2 as N2
from controller.upstream_cases import D as DRIVER
from controller.upstream_cases import claim as c
from controller.upstream_cases import r as res

NO_SCHEDULE = {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}
NO_EXECUTE = {"key": "taint-key", "value": "taint-value-2", "effect": "NoExecute"}
NO_EFFECT = {"key": "taint-key", "value": "taint-value", "effect": "None"}
TOLERATE_NO_SCHEDULE = {"operator": "Exists", "key": "taint-key", "effect": "NoSchedule"}
TOLERATE_NO_EXECUTE = {
    "operator": "Equal",
    "key": "taint-key",
    "value": "taint-value-2",
    "effect": "NoExecute",
}
TAINTED_TWO = [
    slice_(
        "slice-1",
        N1,
        "pool-1",
        device("device-1", taints=[NO_SCHEDULE]),
        device("device-2", taints=[NO_EXECUTE]),
    )
]
GEN = f'device.attributes["{DRIVER}"].generation == '


def _by_generation() -> object:
    """firstAvailable: every v6 device, else every v5 device."""
    return first(
        "req-0",
        sub("subReq-0", 0, selectors=[GEN + '"v6"'], mode="All"),
        sub("subReq-1", 0, selectors=[GEN + '"v5"'], mode="All"),
    )


C0 = "capacity-0"


def _shared(*items: dict[str, object]) -> dict[str, object]:
    """Upstream's one slice of a node's pool-1 for the consumable-capacity cases."""
    return slice_("slice-1", N1, "pool-1", *items)


def _ranged(
    name: str, capacity: str, attributes: dict[str, object] | None = None
) -> dict[str, object]:
    """Return a shareable device whose capacity-0 has upstream's range policy (2..4, step 2)."""
    return device(name, {C0: capacity}, attributes, shared=True, policy={C0: RANGE})


def _valued(name: str, capacity: str, default: str, *more: str) -> dict[str, object]:
    """Return a shareable device whose capacity-0 has a valid-values policy."""
    return device(name, {C0: capacity}, shared=True, policy={C0: valid_values(default, *more)})


TAINTED_ONE_TWICE = [
    slice_("slice-1", N1, "pool-1", device("device-1", taints=[NO_SCHEDULE, NO_EXECUTE]))
]

CASES: list[Case] = [
    Case(
        "unknown-selector",
        claims=[
            c(
                "claim-0",
                {"name": "req-0", "exactly": {"deviceClassName": CLASS_A, "selectors": [{}]}},
            )
        ],
        slices=[one()],
        error=True,
    ),
    Case(
        "unknown-allocation-mode",
        claims=[c("claim-0", req(mode="future-mode"))],
        slices=[one()],
        error=True,
    ),
    Case(
        "unknown-constraint",
        claims=[c("claim-0", req(), constraints=[{}])],
        slices=[one()],
        error=True,
    ),
    Case(
        "invalid-CEL-one-device",
        claims=[c("claim-0", req(selectors=["noSuchVar"]))],
        slices=[one()],
        error=True,
    ),
    Case(
        "invalid-CEL-one-device-class",
        claims=[c("claim-0", req())],
        # Upstream's class has only the bad selector; ours keeps the driver term to stay ours.
        classes=[device_class(CLASS_A, "noSuchVar")],
        slices=[one()],
        error=True,
    ),
    Case(
        "invalid-CEL-all-devices",
        claims=[c("claim-0", req(mode="All", selectors=["noSuchVar"]))],
        slices=[one()],
        error=True,
    ),
    Case("too-many-devices-single-request", claims=[c("claim-0", req("req-0", 500))], error=True),
    # Upstream only checks that 32 devices raise no error; with no slices nothing fits.
    Case("many-devices-okay", claims=[c("claim-0", req("req-0", 32))]),
    Case(
        "too-many-devices-total",
        claims=[c("claim-0", req("req-0", 32), req("req-1", 1))],
        slices=[slice_("slice-1", N1, "pool-1", *devices(33))],
        error=True,
    ),
    Case("all-devices-invalid-CEL", claims=[c("claim-0", req("req-0", 500))], error=True),
    Case(
        "prioritized-list-with-backtracking",
        claims=[
            c(
                "claim-0",
                first(
                    "req-0",
                    sub("subReq-0", selectors=[mem_at_least("8Gi")]),
                    sub("subReq-1", selectors=[mem_at_least("4Gi")]),
                ),
                req("req-1", selectors=[mem_at_least("8Gi")]),
            )
        ],
        slices=[
            slice_("slice-1", N1, "pool-1", device("device-1", {"memory": "8Gi"})),
            slice_("slice-2", N1, "pool-2", device("device-2", {"memory": "4Gi"})),
        ],
        expect=[[res("req-0/subReq-1", "device-2", "pool-2"), res("req-1", "device-1")]],
    ),
    Case("tainted-two-devices", claims=[c("claim-0", req())], slices=TAINTED_TWO),
    Case("tainted-one-device-two-taints", claims=[c("claim-0", req())], slices=TAINTED_ONE_TWICE),
    Case(
        "tainted-two-devices-tolerated",
        claims=[c("claim-0", req(tolerations=[TOLERATE_NO_EXECUTE]))],
        slices=TAINTED_TWO,
        expect=[[res("req-0", "device-2")]],
    ),
    Case(
        "tainted-two-devices-prioritized-list-tolerated",
        claims=[
            c(
                "claim-0",
                first("req-0", sub("subReq-0"), sub("subReq-1", tolerations=[TOLERATE_NO_EXECUTE])),
            )
        ],
        slices=TAINTED_TWO,
        expect=[[res("req-0/subReq-1", "device-2")]],
    ),
    Case(
        "tainted-no-effect",
        claims=[c("claim-0", req())],
        slices=[slice_("slice-1", N1, "pool-1", device("device-1", taints=[NO_EFFECT]))],
        expect=[[res("req-0", "device-1")]],
    ),
    Case(
        "tainted-one-device-two-taints-both-tolerated",
        claims=[c("claim-0", req(tolerations=[TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE]))],
        slices=TAINTED_ONE_TWICE,
        expect=[[res("req-0", "device-1")]],
    ),
    Case(
        "tainted-all-devices-single",
        claims=[c("claim-0", req(count=None, mode="All"))],
        slices=[slice_("slice-1", N1, "pool-1", device("device-1", taints=[NO_SCHEDULE]))],
    ),
    Case(
        "prioritized-list-allocation-mode-all",
        claims=[c("claim-0", first("req-0", sub("subReq-0", 0, mode="All"), sub("subReq-1")))],
        slices=[slice_("slice-1", N1, "pool-1", device("device-1"), device("device-2"))],
        used=[Used("device-2")],
        expect=[[res("req-0/subReq-1", "device-1")]],
    ),
    Case(
        "prioritized-list-allocation-mode-all-with-selectors",
        claims=[c("claim-0", _by_generation())],
        slices=[
            slice_("slice-1", N1, "pool-1", device("device-1", attributes={"generation": "v5"}))
        ],
        expect=[[res("req-0/subReq-1", "device-1")]],
    ),
    Case(
        "prioritized-list-allocation-mode-all-with-selectors-multiple-pools",
        claims=[c("claim-0", _by_generation())],
        slices=[
            slice_("slice-1", N1, "pool-1", device("device-1", attributes={"generation": "v5"})),
            slice_("slice-2", N1, "pool-2", device("device-1", attributes={"generation": "v5"})),
        ],
        expect=[
            [
                res("req-0/subReq-1", "device-1", "pool-1"),
                res("req-0/subReq-1", "device-1", "pool-2"),
            ]
        ],
    ),
    Case(
        "prioritized-list-allocation-mode-all-with-selectors-multiple-pools-across-nodes",
        claims=[c("claim-0", _by_generation())],
        slices=[
            slice_("slice-1", N1, "pool-1", device("device-1", attributes={"generation": "v5"})),
            slice_(
                "slice-2",
                N2,
                "pool-2",
                device("device-1", attributes={"generation": "v5"}),
                device("device-2", attributes={"generation": "v6"}),
            ),
        ],
        expect=[[res("req-0/subReq-1", "device-1", "pool-1")]],
    ),
    Case(
        "prioritized-list-allocation-mode-all-with-selectors-deviceclass-subset",
        claims=[c("claim-0", _by_generation())],
        classes=[device_class(CLASS_A, f'device.attributes["{DRIVER}"].selected')],
        slices=[
            slice_(
                "slice-1",
                N1,
                "pool-1",
                device("device-1", attributes={"generation": "v6", "selected": False}),
                device("device-2", attributes={"generation": "v5", "selected": False}),
                device("device-3", attributes={"generation": "v5", "selected": True}),
            )
        ],
        expect=[[res("req-0/subReq-1", "device-3")]],
    ),
    Case(
        "max-number-devices",
        claims=[c("claim-0", req("req-0", 32))],
        slices=[slice_("slice-1", N1, "pool-1", *devices(32))],
        expect=[[res("req-0", f"device-{i}") for i in range(32)]],
    ),
    Case(
        "prioritized-list-max-allocation-limit-request",
        claims=[
            c(
                "claim-0",
                first("req-0", sub("subReq-0", 32), sub("subReq-1", 16)),
                first("req-1", sub("subReq-0", 32), sub("subReq-1", 16)),
            )
        ],
        slices=[slice_("slice-1", N1, "pool-1", *devices(64))],
        expect=[
            [res("req-0/subReq-1", f"device-{i}") for i in range(16)]
            + [res("req-1/subReq-1", f"device-{i}") for i in range(16, 32)]
        ],
        any_valid=True,
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-missing-capacity-request",
        claims=[c("claim-0", req(capacity={C0: "1"}))],
        slices=[_shared(device("device-1", {"capacity-1": "1"}, shared=True))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-with-missing-capacity-request",
        claims=[c("claim-0", req(count=None, mode="All", capacity={C0: "1"}))],
        classes=[multi_class(True)],
        slices=[_shared(device("device-1", {"capacity-1": "1"}, shared=True))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request",
        claims=[c("claim-0", req()), c("claim-1", req())],
        classes=[multi_class(True)],
        slices=[_shared(device("device-1", shared=True))],
        expect=[[res("req-0", "device-1", consumed={})], [res("req-0", "device-1", consumed={})]],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request",
        claims=[c("claim-0", req()), c("claim-1", req())],
        classes=[multi_class(True)],
        slices=[
            _shared(
                device("device-1", {C0: "1"}, shared=True),
                device("device-2", {C0: "1"}, shared=True),
            )
        ],
        expect=[
            [res("req-0", "device-1", consumed={C0: "1"})],
            [res("req-0", "device-2", consumed={C0: "1"})],
        ],
        any_valid=True,
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block",
        claims=[c("claim-0", req()), c("claim-1", req())],
        classes=[multi_class(True)],
        slices=[_shared(device("device-1", {C0: "2"}, shared=True))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request",
        claims=[c("claim-0", req(capacity={C0: "1"})), c("claim-1", req(capacity={C0: "1"}))],
        classes=[multi_class(True)],
        slices=[_shared(device("device-1", {C0: "2"}, shared=True))],
        expect=[
            [res("req-0", "device-1", consumed={C0: "1"})],
            [res("req-0", "device-1", consumed={C0: "1"})],
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request",
        claims=[c("claim-0", req()), c("claim-1", req())],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "4"))],
        expect=[
            [res("req-0", "device-1", consumed={C0: "2"})],
            [res("req-0", "device-1", consumed={C0: "2"})],
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-zero-request-policy",
        claims=[c("claim-0", req()), c("claim-1", req())],
        classes=[multi_class(True)],
        slices=[_shared(_valued("device-1", "1", "0"))],
        expect=[
            [res("req-0", "device-1", consumed={C0: "0"})],
            [res("req-0", "device-1", consumed={C0: "0"})],
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-violates-zero-request-policy",
        claims=[c("claim-0", req(capacity={C0: "1"}))],
        classes=[multi_class(True)],
        slices=[_shared(_valued("device-1", "1", "0"))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request",
        claims=[c("claim-0", req(capacity={C0: "1"})), c("claim-1", req(capacity={C0: "1"}))],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "4"))],
        expect=[
            [res("req-0", "device-1", consumed={C0: "2"})],
            [res("req-0", "device-1", consumed={C0: "2"})],
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-range-policy-step",
        claims=[c("claim-0", req(capacity={C0: "3"}))],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "4"))],
        expect=[[res("req-0", "device-1", consumed={C0: "4"})]],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy",
        claims=[c("claim-0", req(capacity={C0: "2"}))],
        classes=[multi_class(True)],
        slices=[_shared(_valued("device-1", "4", "1", "2"))],
        expect=[[res("req-0", "device-1", consumed={C0: "2"})]],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up",
        claims=[c("claim-0", req(capacity={C0: "2"}))],
        classes=[multi_class(True)],
        slices=[_shared(_valued("device-1", "3", "1", "3"))],
        expect=[[res("req-0", "device-1", consumed={C0: "3"})]],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request",
        claims=[c("claim-0", req(capacity={C0: "1"})), c("claim-1", req(capacity={C0: "2"}))],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "2"))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy",
        claims=[c("claim-0", req(capacity={C0: "6"}))],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "10"))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining",
        claims=[c("claim-0", req(capacity={C0: "2"}))],
        used=[Used("device-1", consumed={C0: "2"})],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "4"))],
        expect=[[res("req-0", "device-1", consumed={C0: "2"})]],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device",
        claims=[c("claim-0", req(capacity={C0: "2"}))],
        used=[Used("device-1", consumed={C0: "2"})],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "2"), _ranged("device-2", "2"))],
        expect=[[res("req-0", "device-2", consumed={C0: "2"})]],
    ),
    Case(
        "consumable-capacity-with-multi-allocatable-device-backtrack",
        claims=[
            c(
                "claim-0",
                req("req-0", capacity={C0: "2"}),
                req("req-1", capacity={C0: "2"}),
                constraints=[match("stringAttribute")],
            ),
            c("claim-1", req(capacity={C0: "2"})),
        ],
        slices=[
            _shared(
                _ranged("device-2", "2", {"stringAttribute": "stringAttributeValue1"}),
                _ranged("device-1", "4", {"stringAttribute": "stringAttributeValue2"}),
            )
        ],
        expect=[
            [
                res("req-0", "device-1", consumed={C0: "2"}),
                res("req-1", "device-1", consumed={C0: "2"}),
            ],
            [res("req-0", "device-2", consumed={C0: "2"})],
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-subrequest",
        claims=[
            c(
                "claim-0",
                first(
                    "req-0",
                    sub("subReq-0", capacity={C0: "4"}),
                    sub("subReq-1", capacity={C0: "2"}),
                    sub("subReq-1"),
                ),
            )
        ],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "2"))],
        expect=[[res("req-0/subReq-1", "device-1", consumed={C0: "2"})]],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity",
        claims=[c("claim-0", req(capacity={C0: "2"}))],
        used=[Used("device-1", consumed={C0: "2"})],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "2"))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-no-capacity",
        claims=[c("claim-0", req(count=None, mode="All", capacity={C0: "2"}))],
        classes=[multi_class(True)],
        slices=[
            _shared(device("device-1", {C0: "2"}, shared=True), device("device-2", shared=True))
        ],
        expect=[[res("req-0", "device-1", consumed={C0: "2"})]],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-insufficient-capacity",
        claims=[c("claim-0", req(count=None, mode="All", capacity={C0: "2"}))],
        classes=[multi_class(True)],
        slices=[
            _shared(
                device("device-1", {C0: "2"}, shared=True),
                device("device-2", {C0: "1"}, shared=True),
            )
        ],
        expect=[[res("req-0", "device-1", consumed={C0: "2"})]],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-sufficient",
        claims=[
            c(
                "claim-0",
                req("req-0", capacity={C0: "1"}),
                req("req-1", count=None, mode="All", capacity={C0: "1"}),
            )
        ],
        slices=[
            _shared(
                device("device-1", {C0: "2"}, shared=True),
                device("device-2", {C0: "1"}, shared=True),
            )
        ],
        expect=[
            [
                res("req-0", "device-1", consumed={C0: "1"}),
                res("req-1", "device-1", consumed={C0: "1"}),
                res("req-1", "device-2", consumed={C0: "1"}),
            ]
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-sufficient",
        claims=[c("claim-0", req(count=None, mode="All", capacity={C0: "1"}))],
        used=[Used("device-1", consumed={C0: "1"})],
        slices=[
            _shared(
                device("device-1", {C0: "2"}, shared=True),
                device("device-2", {C0: "1"}, shared=True),
            )
        ],
        expect=[
            [
                res("req-0", "device-1", consumed={C0: "1"}),
                res("req-0", "device-2", consumed={C0: "1"}),
            ]
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-insufficient",
        claims=[
            c(
                "claim-0",
                req("req-0", capacity={C0: "1"}),
                req("req-1", count=None, mode="All", capacity={C0: "1"}),
            )
        ],
        slices=[
            _shared(
                device("device-1", {C0: "1"}, shared=True),
                device("device-2", {C0: "1"}, shared=True),
            )
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient",
        claims=[c("claim-0", req(count=None, mode="All", capacity={C0: "1"}))],
        used=[Used("device-1", consumed={C0: "1"})],
        slices=[
            _shared(
                device("device-1", {C0: "1"}, shared=True),
                device("device-2", {C0: "1"}, shared=True),
            )
        ],
        expect=[[res("req-0", "device-2", consumed={C0: "1"})]],
    ),
    Case(
        "consumable-capacity-dedicated-device-with-consumable-capacity-request",
        claims=[c("claim-0", req(capacity={C0: "1"}))],
        classes=[multi_class(False)],
        slices=[_shared(device("device-1", {C0: "1"}))],
        expect=[[res("req-0", "device-1")]],
    ),
    Case(
        "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request",
        claims=[c("claim-0", req(capacity={C0: "1"})), c("claim-1", req(capacity={C0: "1"}))],
        classes=[multi_class(False)],
        slices=[_shared(device("device-1", {C0: "2"}, policy={C0: RANGE}))],
    ),
    Case(
        "allow-multiple-allocations-exclude-multi-allocatable-device-by-class-selector",
        claims=[c("claim-0", req(capacity={C0: "1"}))],
        classes=[multi_class(False)],
        slices=[_shared(device("device-1", {C0: "1"}, shared=True))],
    ),
    Case(
        "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated",
        claims=[c("claim-0", req(capacity={C0: "1"}))],
        used=[Used("device-1")],
        classes=[multi_class(True)],
        slices=[_shared(_ranged("device-1", "2"))],
    ),
]
