"""Ported allocator cases, third part (constraints, multi-host pools), and those left out."""

from __future__ import annotations

from controller.upstream_cases import NODE1 as N1
from controller.upstream_cases import NODE2 as N2
from controller.upstream_cases import (
    RANGE,
    Case,
    Used,
    Version,
    device,
    distinct,
    first,
    match,
    multi_class,
    req,
    slice_,
    sub,
)
from controller.upstream_cases import D as DRIVER
from controller.upstream_cases import claim as c
from controller.upstream_cases import r as res
from controller.upstream_cases_2 import NO_SCHEDULE

C0 = "capacity-0"
BOOL = f'device.attributes["{DRIVER}"].boolAttribute'
TYPE = f'device.attributes["{DRIVER}"].type == '


def _typed(*types: str) -> list[dict[str, object]]:
    """One slice whose device-<i+1> has ``type`` ``types[i]``."""
    return [
        slice_(
            "slice-1",
            N1,
            "pool-1",
            *(device(f"device-{i}", attributes={"type": t}) for i, t in enumerate(types, 1)),
        )
    ]


def _pool(name: str, node: str, generation: int, *names: str) -> dict[str, object]:
    """Return a slice of a two-slice ``pool-1`` (a pool that spans nodes)."""
    return slice_(name, node, "pool-1", *(device(n) for n in names), count=2, generation=generation)


def _distinct_devices() -> list[dict[str, object]]:
    rows = [("1.0.0", 0, True), ("1.0.1", 1, False), ("1.0.2", 2, True), ("1.0.0", 3, True)]
    return [
        slice_(
            "slice-1",
            N1,
            "pool-1",
            *(
                device(
                    f"device-{i}",
                    attributes={"driverVersion": Version(v), "numa": n, "boolAttribute": b},
                    shared=True,
                )
                for i, (v, n, b) in enumerate(rows, 1)
            ),
        )
    ]


_MULTI_HOST = "divergence: a pool's generation and completeness are tracked per node"

CASES: list[Case] = [
    Case(
        "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-allocatable",
        claims=[c("claim-0", req(capacity={C0: "1"}))],
        used=[Used("device-1", consumed={C0: "1"})],
        classes=[multi_class(True)],
        slices=[slice_("slice-1", N1, "pool-1", device("device-1", {C0: "2"}, policy={C0: RANGE}))],
    ),
    Case(
        "with-distinct-constraints",
        claims=[
            c(
                "claim-0",
                req("req-0"),
                req("req-1"),
                req("req-2"),
                req("req-3"),
                constraints=[
                    distinct("boolAttribute", "req-0", "req-1"),
                    distinct("driverVersion", "req-0", "req-1", "req-2"),
                    distinct("numa", "req-0", "req-1", "req-2", "req-3"),
                ],
            )
        ],
        slices=_distinct_devices(),
        expect=[
            [
                res("req-0", "device-1", consumed={}),
                res("req-1", "device-2", consumed={}),
                res("req-2", "device-3", consumed={}),
                res("req-3", "device-4", consumed={}),
            ]
        ],
        any_valid=True,
    ),
    Case(
        "with-distinct-constraints-attribute-not-set",
        claims=[c("claim-0", req(), constraints=[distinct("boolAttribute", "req-0")])],
        slices=[slice_("slice-1", N1, "pool-1", device("device-1", shared=True))],
    ),
    Case(
        "with-distinct-constraints-unknown-type-attribute",
        claims=[c("claim-0", req(), constraints=[distinct("boolAttribute", "req-0")])],
        slices=[
            slice_(
                "slice-1",
                N1,
                "pool-1",
                {
                    "name": "device-1",
                    "attributes": {"boolAttribute": {}},
                    "allowMultipleAllocations": True,
                },
            )
        ],
        error=True,
    ),
    Case(
        "with-distinct-constraints-with-subrequests",
        claims=[
            c(
                "claim-0",
                *(
                    first(name, sub("subReq-0", selectors=[BOOL]), sub("subReq-1"))
                    for name in ("req-0", "req-1", "req-2")
                ),
                constraints=[distinct("boolAttribute", "req-0", "req-1")],
            )
        ],
        slices=[
            slice_(
                "slice-1",
                N1,
                "pool-1",
                device("device-1", attributes={"boolAttribute": True}, shared=True),
                device("device-2", attributes={"boolAttribute": False}, shared=True),
            )
        ],
        expect=[
            [
                res("req-0/subReq-0", "device-1", consumed={}),
                res("req-1/subReq-1", "device-2", consumed={}),
                res("req-2/subReq-0", "device-1", consumed={}),
            ]
        ],
    ),
    Case(
        "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint",
        claims=[
            c(
                "claim-0",
                req("req-0", capacity={C0: "1"}),
                req("req-1", capacity={C0: "1"}),
                constraints=[distinct("stringAttribute")],
            )
        ],
        classes=[multi_class(True)],
        slices=[
            slice_(
                "slice-1",
                N1,
                "pool-1",
                device(
                    "device-1",
                    {C0: "2"},
                    {"stringAttribute": "stringAttributeValue"},
                    shared=True,
                    policy={C0: RANGE},
                ),
            )
        ],
    ),
    Case(
        "distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint",
        claims=[
            c(
                "claim-0",
                req("req-0", capacity={C0: "2"}),
                req("req-1", capacity={C0: "2"}),
                constraints=[distinct("stringAttribute")],
            )
        ],
        classes=[multi_class(True)],
        slices=[
            slice_(
                "slice-1",
                N1,
                "pool-1",
                device(
                    f"device-{i}",
                    {C0: "4"},
                    {"stringAttribute": f"stringAttributeValue{i}"},
                    shared=True,
                    policy={C0: RANGE},
                ),
                count=2,
            )
            for i in (1, 2)
        ],
        expect=[
            [
                res("req-0", "device-1", consumed={C0: "2"}),
                res("req-1", "device-2", consumed={C0: "2"}),
            ]
        ],
        any_valid=True,
    ),
    Case(
        "list-attributes-match-constaint-scalar-string-values",
        claims=[c("claim-0", req("req-0", 2), constraints=[match("stringAttribute")])],
        slices=[
            slice_(
                "slice-1",
                N1,
                "pool-1",
                device("device-1", attributes={"stringAttribute": "value1"}),
                device("device-2", attributes={"stringAttribute": "value1"}),
            )
        ],
        expect=[[res("req-0", "device-1"), res("req-0", "device-2")]],
    ),
    *(
        Case(
            name,
            claims=[c("claim-0", req("req-0", 2), constraints=[distinct("stringAttribute")])],
            slices=[
                slice_(
                    "slice-1",
                    N1,
                    "pool-1",
                    device("device-1", attributes={"stringAttribute": "value1"}),
                    device("device-2", attributes={"stringAttribute": second}),
                )
            ],
            expect=expect,
        )
        for name, second, expect in [
            (
                "list-attributes-distinct-constraint-scalar-string-values-all-distinct",
                "value2",
                [[res("req-0", "device-1"), res("req-0", "device-2")]],
            ),
            (
                "list-attributes-distinct-constraint-scalar-string-values-not-distinct",
                "value1",
                None,
            ),
        ]
    ),
    Case(
        "allocation-mode-all-with-multi-host-resource-pool",
        claims=[c("claim-0", req(count=None, mode="All"))],
        slices=[_pool("slice-1", N1, 1, "device-1"), _pool("slice-2", N2, 1, "device-2")],
        expect=[[res("req-0", "device-1")]],
    ),
    Case(
        "multi-host-resource-pool-with-stale-slice-for-current-node",
        claims=[c("claim-0", req())],
        slices=[_pool("slice-1", N1, 1, "device-1"), _pool("slice-2", N2, 2, "device-2")],
    ),
    Case(
        "multi-host-resource-pool-complete-update-from-node-1-to-node-2",
        claims=[c("claim-0", req())],
        slices=[
            _pool("slice-1", N1, 1, "device-1"),
            _pool("slice-1", N1, 1, "device-2"),
            _pool("slice-2", N2, 2, "device-1"),
            _pool("slice-2", N2, 2, "device-2"),
        ],
        expect=[[res("req-0", "device-1")]],
    ),
    Case(
        "multi-host-resource-pool-complete-update-from-node-2-to-node-1",
        claims=[c("claim-0", req())],
        slices=[
            _pool("slice-1", N2, 1, "device-1"),
            _pool("slice-1", N2, 1, "device-2"),
            _pool("slice-2", N1, 2, "device-1"),
            _pool("slice-2", N1, 2, "device-2"),
        ],
        expect=[[res("req-0", "device-1")]],
    ),
    Case(
        "multi-host-resource-pool-incomplete-update-from-node-1-to-node-2",
        claims=[c("claim-0", req())],
        slices=[
            _pool("slice-1", N1, 1, "device-1"),
            _pool("slice-1", N1, 1, "device-2"),
            _pool("slice-2", N2, 2, "device-1"),
        ],
        expect=[[res("req-0", "device-1")]],
    ),
    Case(
        "multi-host-resource-pool-incomplete-update-from-node-2-to-node-1",
        claims=[c("claim-0", req())],
        slices=[
            _pool("slice-1", N2, 1, "device-1"),
            _pool("slice-1", N2, 1, "device-2"),
            _pool("slice-2", N1, 2, "device-1"),
        ],
    ),
    Case(
        "different-resourceslices-in-pool-can-target-different-nodes",
        claims=[c("claim-0", req())],
        slices=[_pool("slice-1", N2, 1, "device-1"), _pool("slice-2", N1, 1, "device-2")],
        expect=[[res("req-0", "device-2")]],
    ),
    Case(
        "invalid-pool-is-ok-if-devices-can-be-allocated-from-other",
        claims=[c("claim-0", req())],
        slices=[
            _pool("slice-1", N1, 1, "device-1"),
            _pool("slice-2", N1, 1, "device-1"),
            slice_("slice-3", N1, "pool-2", device("device-2")),
        ],
        expect=[[res("req-0", "device-2", "pool-2")]],
    ),
    Case(
        "invalid-pool-is-error-if-no-other-device-can-be-allocated",
        claims=[c("claim-0", req())],
        used=[Used("device-2", "pool-2")],
        slices=[
            _pool("slice-1", N1, 1, "device-1"),
            _pool("slice-2", N1, 1, "device-1"),
            slice_("slice-3", N1, "pool-2", device("device-2")),
        ],
        error=True,
    ),
    Case(
        "no-allocation-from-incomplete-pools",
        claims=[c("claim-0", req())],
        slices=[_pool("slice-1", N1, 1, "device-1")],
    ),
    Case(
        "check-combinations-within-single-request-single-pool-single-slice",
        claims=[c("claim-0", req("req-0", 5))],
        slices=[slice_("slice-1", N1, "pool-1", *(device(f"device-{i}") for i in range(1, 5)))],
    ),
    Case(
        "check-combinations-within-single-request-single-pool-multiple-slices",
        claims=[c("claim-0", req("req-0", 5))],
        slices=[
            _pool("slice-1", N1, 1, "device-1", "device-2"),
            _pool("slice-2", N1, 1, "device-3", "device-4"),
        ],
    ),
    Case(
        "check-combinations-within-single-request-multiple-pools-multiple-slices",
        claims=[c("claim-0", req("req-0", 5))],
        slices=[
            _pool("slice-1", N1, 1, "device-1"),
            _pool("slice-2", N1, 1, "device-2"),
            slice_("slice-3", N1, "pool-2", device("device-3"), device("device-4")),
        ],
    ),
    Case(
        "check-combinations-within-single-request-many-pools",
        claims=[c("claim-0", req("req-0", 5))],
        slices=[slice_(f"slice-{i}", N1, f"pool-{i}", device(f"device-{i}")) for i in range(1, 5)],
    ),
    Case(
        "check-combinations-with-backtracking",
        claims=[c("claim-0", req("req-1", 2), req("req-2", selectors=[TYPE + '"X"']))],
        slices=_typed("X", "Y", "Y"),
        expect=[[res("req-1", "device-2"), res("req-1", "device-3"), res("req-2", "device-1")]],
    ),
    Case(
        "check-combinations-with-prioritized-list",
        claims=[
            c(
                "claim-0",
                first("req-1", sub("subReq-0", 3, selectors=[TYPE + '"Y"']), sub("subReq-1", 2)),
                first("req-2", sub("subReq-0", 2), sub("subReq-1", selectors=[TYPE + '"X"'])),
            )
        ],
        slices=_typed("X", "Y", "Y"),
        expect=[
            [
                res("req-1/subReq-1", "device-2"),
                res("req-1/subReq-1", "device-3"),
                res("req-2/subReq-1", "device-1"),
            ]
        ],
    ),
]

TWO = [slice_("slice-1", N1, "pool-1", device("device-1"), device("device-2"))]

# Admin access: the card is seen whoever uses it, and nothing is counted; one claim still
# lists a card once.
CASES += [
    Case(
        "all-devices-some-allocated-admin-access",
        claims=[c("claim-0", req(mode="All", count=None, admin=True))],
        slices=TWO,
        used=[Used("device-1")],
        expect=[[res("req-0", "device-1"), res("req-0", "device-2")]],
    ),
    Case(
        "all-devices-some-allocating-admin-access",
        claims=[c("claim-0", req(admin=True), req("req-1", mode="All", count=None, admin=True))],
        slices=TWO,
        expect=None,
    ),
    Case(
        "count-devices-some-allocated-admin-access",
        claims=[c("claim-0", req(count=2, admin=True))],
        slices=TWO,
        used=[Used("device-1")],
        expect=[[res("req-0", "device-1"), res("req-0", "device-2")]],
    ),
    Case(
        "separate-claims-share-device-admin-access",
        claims=[c("claim-0", req(admin=True)), c("claim-1", req(admin=True))],
        slices=TWO,
        expect=[[res("req-0", "device-1")], [res("req-0", "device-1")]],
    ),
    Case(
        "admin-access-claims-device-allocating-for-non-admin-access",
        claims=[c("claim-0", req()), c("claim-1", req(admin=True))],
        slices=TWO,
        expect=[[res("req-0", "device-1")], [res("req-0", "device-1")]],
    ),
    Case(
        "tainted-admin-access",
        claims=[c("claim-0", req(admin=True))],
        slices=[slice_("slice-1", N1, "pool-1", device("device-1", taints=[NO_SCHEDULE]))],
        used=[Used("device-1"), Used("device-2")],
        expect=None,
    ),
    Case(
        "admin-access-enabled",
        claims=[c("claim-0", req(admin=True))],
        slices=[slice_("slice-1", N1, "pool-1", device("device-1"))],
        used=[Used("device-1"), Used("device-2")],
        expect=[[res("req-0", "device-1")]],
    ),
]

_SECOND_DRIVER = "needs a second driver's devices (only kube-scheduler allocates those)"
_NOT_LOCAL = "slices not local to a node (allNodes / nodeSelector)"
_COUNTERS = "partitionable devices (consumesCounters / sharedCounters)"
_BINDING = "binding conditions (DRADeviceBindingConditions)"
_LISTS = "list-type attributes (DRAListTypeAttributes): our cards publish none"

LEFT_OUT: dict[str, str] = {
    "empty": "no claims and no node: the engine is only asked about a pod with claims",
    "all-devices-plus-another": _SECOND_DRIVER,
    "all-devices-plus-another-reversed": _SECOND_DRIVER,
    "all-devices-many-plus-another": _SECOND_DRIVER,
    "all-devices-many-plus-another-reversed": _SECOND_DRIVER,
    "all-devices-slice-without-devices-prioritized-list": _SECOND_DRIVER,
    "all-devices-no-slices-prioritized-list": _SECOND_DRIVER,
    "all-devices-some-allocated-prioritized-list": _SECOND_DRIVER,
    "network-attached-device": _NOT_LOCAL,
    "unsuccessful-allocation-network-attached-device": _NOT_LOCAL,
    "many-network-attached-devices": _NOT_LOCAL,
    "local-and-network-attached-devices": _NOT_LOCAL,
    "several-different-drivers": _SECOND_DRIVER,
    "admin-access-disabled": "feature gate off (DRAAdminAccess)",
    "with-class-device-config-with-multiple-request-and-configs": _SECOND_DRIVER,
    "prioritized-list-first-unavailable": _SECOND_DRIVER,
    "prioritized-list-non-available": _SECOND_DRIVER,
    "prioritized-list-device-config": _SECOND_DRIVER,
    "prioritized-list-class-config": _SECOND_DRIVER,
    "prioritized-list-disabled": "feature gate off (DRAPrioritizedList)",
    "prioritized-list-too-many-in-first-subrequest": _SECOND_DRIVER,
    "partitionable-devices-single-device": _COUNTERS,
    "partitionable-devices-prioritized-list": _COUNTERS,
    "partitionable-devices-multiple-devices": _COUNTERS,
    "partitionable-devices-multiple-capacity-pools": _COUNTERS,
    "partitionable-devices-multiple-counters": _COUNTERS,
    "partitionable-devices-multiple-pools": _COUNTERS,
    "partitionable-devices-unused-counters-in-counter-set": _COUNTERS,
    "partitionable-devices-no-capacity-available": _COUNTERS,
    "partitionable-devices-overallocated-capacity-pool": _COUNTERS,
    "partitionable-devices-disabled-device-consumes-counters": _COUNTERS,
    "partitionable-devices-disabled-other-device-do-not-consume-counters": _COUNTERS,
    "partitionable-devices-disabled-per-device-node-selection": _NOT_LOCAL,
    "partitionable-devices-per-device-node-selection-nodename": _NOT_LOCAL,
    "partitionable-devices-per-device-node-selection-node-selector": _NOT_LOCAL,
    "partitionable-devices-per-device-node-selection-node-selector-multiple-devices": _NOT_LOCAL,
    "tainted-disabled": "feature gate off (DRADeviceTaints)",
    "tainted-prioritized-list": _SECOND_DRIVER,
    "tainted-prioritized-list-disabled": _SECOND_DRIVER,
    "tainted-admin-access-disabled": "feature gate off (DRADeviceTaints)",
    "tainted-all-devices-single-disabled": "feature gate off (DRADeviceTaints)",
    "partitionable-devices-with-attribute-selector": _COUNTERS,
    "prioritized-list-max-allocation-allocation-mode-all": _SECOND_DRIVER,
    "device-binding-conditions": _BINDING,
    "binding-conditions-multiple-devices": _BINDING,
    "binding-conditions-with-and-without": _BINDING,
    "binding-conditions-without-feature-gate": _BINDING,
    "node-restriction": _NOT_LOCAL,
    "partitionable-devices-with-binding-conditions": _COUNTERS,
    "partitionable-devices-with-binding-conditions-multiple": _COUNTERS,
    "partitionable-devices-with-binding-conditions-some-devices-no-conditions": _COUNTERS,
    "partitionable-devices-with-binding-conditions-multi-slices": _COUNTERS,
    "partitionable-devices-with-binding-conditions-and-taints": _COUNTERS,
    "partitionable-devices-with-binding-conditions-and-taints-tolerated": _COUNTERS,
    "consumable-capacity-disabled-feature": "feature gate off (DRAConsumableCapacity)",
    "consumable-capacity-disabled-feature-with-prioritized-list": (
        "feature gate off (DRAConsumableCapacity)"
    ),
    "allow-multiple-allocations-with-partitionable-device": _COUNTERS,
    "consumable-capacity-with-partitionable-device-multiple-capacity-pools": _COUNTERS,
    **{
        f"list-attributes-{name}": _LISTS
        for name in (
            "match-constaint-list-of-string-values-with-common-elements",
            "match-constaint-list-of-string-values-with-partially-common-elements",
            "match-constaint-list-of-string-values-without-common-elements",
            "match-constaint-mixed-scalar-and-list-of-string-values-with-common-elements",
            "match-constaint-mixed-scalar-and-list-of-string-values-with-partially-common-elements",
            "match-constaint-mixed-scalar-and-list-of-string-values-without-common-elements",
            "match-constaint-list-of-int-values-with-common-elements",
            "match-constaint-list-of-bool-values-with-common-elements",
            "match-constaint-list-of-version-values-with-common-elements",
            "match-constaint-with-empty-or-unknown-type",
            "disabled-match-constraint-with-lists",
            "distinct-constraint-list-of-string-values-all-distinct",
            "distinct-constraint-list-of-string-values-with-common-elements",
            "distinct-constraint-mixed-scalar-and-list-all-distinct",
            "distinct-constraint-mixed-scalar-and-list-with-common-elements",
            "distinct-constraint-list-of-int-values-all-distinct",
            "distinct-constraint-list-of-bool-values-all-distinct",
            "distinct-constraint-list-of-version-values-all-distinct",
            "distinct-constaint-with-empty-or-unknown-type",
            "disabled-distinct-constraint-with-lists",
        )
    },
    "partitionable-devices-same-counter-set-name-in-different-resource-slices": _COUNTERS,
    "partitionable-devices-device-counter-consumption-references-unknown-counter-set": _COUNTERS,
    "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set": (
        _COUNTERS
    ),
    "partitionable-devices-device-counter-consumption-references-counter-set-in-other-pool": (
        _COUNTERS
    ),
    "partitionable-devices-devices-on-different-nodes-consume-same-counter-set": _COUNTERS,
    "partitionable-devices-validation-error-on-non-targeting-slice": _COUNTERS,
    "check-combinations-with-backtracking-across-slices-and-pools": _BINDING,
}
