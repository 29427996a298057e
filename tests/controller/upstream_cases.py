"""kube-scheduler's allocator test table (``allocator_testing.go``): builders, first cases.

Upstream's ``driver-a`` is our driver and ``class-a`` one of our DeviceClasses; objects keep
upstream's names (pools, slices, devices, requests) so a case reads like its original. A case
records upstream's expected outcome; ``test_upstream_allocator.py`` runs it through the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

Object = dict[str, Any]

D = "gpushare.dra.dev"
"""Upstream's ``driver-a``."""
OTHER = "driver-b"
"""Upstream's ``driver-b``: only ever seen as slices the engine must ignore."""
NODE1, NODE2 = "node-1", "node-2"
CLASS_A, CLASS_B = "class-a", "class-b"


@dataclasses.dataclass(frozen=True)
class Version:
    """A ``version`` attribute value (a plain ``str`` is a ``string`` attribute)."""

    text: str


def _attribute(value: object) -> Object:
    if isinstance(value, Version):
        return {"version": value.text}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def device(
    name: str,
    capacity: Mapping[str, str] | None = None,
    attributes: Mapping[str, object] | None = None,
    *,
    shared: bool = False,
    policy: Mapping[str, Object] | None = None,
    taints: Sequence[Object] = (),
) -> Object:
    """Return a slice device; ``policy`` maps a capacity name to its ``requestPolicy``."""
    raw: Object = {"name": name}
    if attributes:
        raw["attributes"] = {k: _attribute(v) for k, v in attributes.items()}
    if capacity:
        raw["capacity"] = {
            k: {"value": v, **({"requestPolicy": policy[k]} if policy and k in policy else {})}
            for k, v in capacity.items()
        }
    if shared:
        raw["allowMultipleAllocations"] = True
    if taints:
        raw["taints"] = list(taints)
    return raw


def devices(count: int, start: int = 0) -> list[Object]:
    """Return bare ``device-<start>``... (upstream's ``sliceWithMultipleDevices``)."""
    return [device(f"device-{i}") for i in range(start, start + count)]


def slice_(
    name: str,
    node: str,
    pool: str,
    *items: Object,
    driver: str = D,
    count: int = 1,
    generation: int = 1,
) -> Object:
    """Return a node-local ResourceSlice (upstream's ``sliceWithDevices``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": list(items),
        },
    }


def one(name: str = "slice-1", node: str = NODE1, pool: str = "pool-1") -> Object:
    """Upstream's ``sliceWithOneDevice``."""
    return slice_(name, node, pool, device("device-1"))


def device_class(
    name: str = CLASS_A, *expressions: str, config: Object | None = None, driver: str = D
) -> Object:
    """Return a DeviceClass whose first selector names the driver (how ours are recognised)."""
    selectors = [f'device.driver == "{driver}"', *expressions]
    spec: Object = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if config is not None:
        spec["config"] = [{"opaque": {"driver": driver, "parameters": config}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def share_config(**fields: str) -> Object:
    """GpuShareConfig parameters.

    Upstream's configs are arbitrary JSON; our driver validates its opaque config, so cases
    about config copying use a valid one of ours instead.
    """
    return {"apiVersion": f"{D}/v1alpha1", "kind": "GpuShareConfig", **fields}


def _exact(
    cls: str,
    count: int | None,
    *,
    selectors: Sequence[str],
    mode: str | None,
    capacity: Mapping[str, str] | None,
    tolerations: Sequence[Object],
    admin: bool = False,
) -> Object:
    entry: Object = {"deviceClassName": cls, "allocationMode": mode or "ExactCount"}
    if admin:
        entry["adminAccess"] = True
    if count is not None:
        entry["count"] = count
    if selectors:
        entry["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if capacity:
        entry["capacity"] = {"requests": dict(capacity)}
    if tolerations:
        entry["tolerations"] = list(tolerations)
    return entry


def req(
    name: str = "req-0",
    count: int | None = 1,
    cls: str = CLASS_A,
    *,
    selectors: Sequence[str] = (),
    mode: str | None = None,
    capacity: Mapping[str, str] | None = None,
    tolerations: Sequence[Object] = (),
    admin: bool = False,
) -> Object:
    """Return an ``exactly`` request (upstream's ``request``; ``mode="All"``: allDeviceRequest).

    ``admin``: ``adminAccess: true``.
    """
    return {
        "name": name,
        "exactly": _exact(
            cls,
            count,
            selectors=selectors,
            mode=mode,
            capacity=capacity,
            tolerations=tolerations,
            admin=admin,
        ),
    }


def sub(
    name: str,
    count: int | None = 1,
    cls: str = CLASS_A,
    *,
    selectors: Sequence[str] = (),
    mode: str | None = None,
    capacity: Mapping[str, str] | None = None,
    tolerations: Sequence[Object] = (),
) -> Object:
    """Return a ``firstAvailable`` sub-request (upstream's ``subRequest``)."""
    return {
        "name": name,
        **_exact(
            cls,
            count,
            selectors=selectors,
            mode=mode,
            capacity=capacity,
            tolerations=tolerations,
        ),
    }


def first(name: str, *subs: Object) -> Object:
    """Return a request with a prioritized list (upstream's ``requestWithPrioritizedList``)."""
    return {"name": name, "firstAvailable": list(subs)}


def claim(
    name: str,
    *requests: Object,
    constraints: Sequence[Object] = (),
    config: Sequence[Object] = (),
) -> Object:
    """Return a claim's name and ``spec.devices``; the runner makes the ResourceClaim."""
    devices_: Object = {"requests": list(requests)}
    if constraints:
        devices_["constraints"] = list(constraints)
    if config:
        devices_["config"] = list(config)
    return {"name": name, "devices": devices_}


def claim_config(parameters: Object, requests: Sequence[str] = ()) -> Object:
    """Return a claim ``config`` entry for our driver."""
    entry: Object = {"opaque": {"driver": D, "parameters": parameters}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def match(attribute: str, *requests: str) -> Object:
    """Return a ``matchAttribute`` constraint on ``<driver>/<attribute>``."""
    return {
        "matchAttribute": f"{D}/{attribute}",
        **({"requests": list(requests)} if requests else {}),
    }


def distinct(attribute: str, *requests: str) -> Object:
    """Return a ``distinctAttribute`` constraint on ``<driver>/<attribute>``."""
    return {
        "distinctAttribute": f"{D}/{attribute}",
        **({"requests": list(requests)} if requests else {}),
    }


def mem_at_least(quantity: str) -> str:
    """Upstream's recurring selector on the ``memory`` capacity."""
    return f'device.capacity["{D}"].memory.compareTo(quantity("{quantity}")) >= 0'


Result = tuple[str, str, str] | tuple[str, str, str, tuple[tuple[str, str], ...]]
"""``(request, pool, device)`` of one allocation result, plus what a share consumes."""


def r(
    request: str,
    device_name: str,
    pool: str = "pool-1",
    *,
    consumed: Mapping[str, str] | None = None,
) -> Result:
    """One expected allocation result; with ``consumed`` (maybe empty) it is a share."""
    if consumed is None:
        return (request, pool, device_name)
    return (request, pool, device_name, tuple(sorted(consumed.items())))


RANGE = {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}
"""Upstream's ``withCapacityRequestPolicyRange``."""


def valid_values(default: str, *more: str) -> Object:
    """Upstream's ``withCapacityRequestPolicyValidValues``."""
    return {"default": default, "validValues": [default, *more]}


def multi_class(allowed: bool) -> Object:
    """Upstream's ``classWithAllowMultipleAllocations``: one selector, two ``&&`` terms."""
    made = device_class()
    expression = (
        f'device.driver == "{D}" && device.allowMultipleAllocations == {str(allowed).lower()}'
    )
    made["spec"]["selectors"] = [{"cel": {"expression": expression}}]
    return made


@dataclasses.dataclass(frozen=True)
class Used:
    """A device already allocated to another claim (upstream's ``allocatedDevices``).

    With ``consumed`` set it is a share (``allocatedCapacityDevices`` / shared device IDs).
    """

    device: str
    pool: str = "pool-1"
    consumed: Mapping[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    """One upstream table entry.

    ``expect`` is one list of results per claim to allocate, or ``None`` when upstream finds no
    allocation (``error`` says it reports an error rather than "does not fit"). With
    ``any_valid`` upstream's answer is one of several valid ones, so the runner checks validity
    (same requests and counts, constraints, no device twice) rather than identity.
    ``configs`` is, per claim, the expected ``(source, requests)`` of each config entry.
    """

    name: str
    claims: Sequence[Object]
    slices: Sequence[Object] = ()
    classes: Sequence[Object] = dataclasses.field(default_factory=lambda: [device_class()])
    used: Sequence[Used] = ()
    node: str = NODE1
    region: str = "region-1"
    expect: Sequence[Sequence[Result]] | None = None
    error: bool = False
    any_valid: bool = False
    configs: Sequence[Sequence[tuple[str, Sequence[str]]]] | None = None


CASES: list[Case] = [
    Case(
        "simple",
        claims=[claim("claim-0", req())],
        slices=[one()],
        expect=[[r("req-0", "device-1")]],
    ),
    Case(
        "other-node",
        claims=[claim("claim-0", req())],
        slices=[
            slice_("slice-1", NODE1, "pool-1", device("device-1"), driver=OTHER),
            one("slice-2", NODE2, "pool-2"),
        ],
        node=NODE2,
        region="region-2",
        expect=[[r("req-0", "device-1", "pool-2")]],
    ),
    Case(
        "small-and-large",
        claims=[
            claim(
                "claim-0",
                req("req-0", selectors=[mem_at_least("1Gi")]),
                req("req-1", selectors=[mem_at_least("2Gi")]),
            )
        ],
        slices=[
            slice_(
                "slice-1",
                NODE1,
                "pool-1",
                device("device-1", {"memory": "1Gi"}),
                device("device-2", {"memory": "2Gi"}),
            )
        ],
        expect=[[r("req-0", "device-1"), r("req-1", "device-2")]],
    ),
    Case(
        "small-and-large-backtrack-requests",
        claims=[
            claim(
                "claim-0",
                req("req-0", selectors=[mem_at_least("1Gi")]),
                req("req-1", selectors=[mem_at_least("2Gi")]),
            )
        ],
        slices=[
            slice_(
                "slice-1",
                NODE1,
                "pool-1",
                device("device-2", {"memory": "2Gi"}),
                device("device-1", {"memory": "1Gi"}),
            )
        ],
        expect=[[r("req-0", "device-1"), r("req-1", "device-2")]],
    ),
    Case(
        "small-and-large-backtrack-claims",
        claims=[
            claim("claim-0", req("req-0", selectors=[mem_at_least("1Gi")])),
            claim("claim-1", req("req-1", selectors=[mem_at_least("2Gi")])),
        ],
        slices=[
            slice_(
                "slice-1",
                NODE1,
                "pool-1",
                device("device-2", {"memory": "2Gi"}),
                device("device-1", {"memory": "1Gi"}),
            )
        ],
        expect=[[r("req-0", "device-1")], [r("req-1", "device-2")]],
    ),
    Case(
        "devices-split-across-different-slices",
        claims=[claim("claim-0", req("req-0", 2))],
        slices=[one("slice-1", NODE1, "pool-1"), one("slice-2", NODE1, "pool-2")],
        expect=[[r("req-0", "device-1", "pool-1"), r("req-0", "device-1", "pool-2")]],
    ),
    Case(
        "obsolete-slice",
        claims=[claim("claim-0", req())],
        slices=[
            slice_("slice-1-obsolete", NODE1, "pool-1", device("device-1"), count=2),
            slice_("slice-1-obsolete", NODE1, "pool-1", device("device-2"), count=2, generation=2),
        ],
    ),
    Case(
        "duplicate-slice",
        claims=[claim("claim-0", req())],
        slices=[
            slice_("slice-1", NODE1, "pool-1", device("device-1"), count=2),
            slice_("slice-1-2", NODE1, "pool-1", device("device-1"), count=2),
        ],
        error=True,
    ),
    Case("no-slices", claims=[claim("claim-0", req())]),
    Case(
        "not-enough-suitable-devices",
        claims=[claim("claim-0", req("req-0")), claim("claim-0", req("req-1"))],
        slices=[one()],
    ),
    Case("no-classes", claims=[claim("claim-0", req())], slices=[one()], classes=[], error=True),
    Case(
        "unknown-class",
        claims=[claim("claim-0", req(cls="unknown-class"))],
        slices=[one()],
        error=True,
    ),
    Case("empty-class", claims=[claim("claim-0", req(cls=""))], slices=[one()], error=True),
    Case("no-claims-to-allocate", claims=[], slices=[one()], expect=[]),
    Case(
        "all-devices-single",
        claims=[claim("claim-0", req(count=None, mode="All"))],
        slices=[one()],
        expect=[[r("req-0", "device-1")]],
    ),
    Case(
        "all-devices-many",
        claims=[claim("claim-0", req(count=None, mode="All"))],
        slices=[one("slice-1", NODE1, "pool-1"), one("slice-1", NODE1, "pool-2")],
        expect=[[r("req-0", "device-1", "pool-1"), r("req-0", "device-1", "pool-2")]],
    ),
    Case(
        "all-devices-of-the-incomplete-pool",
        claims=[claim("claim-0", req(count=1, mode="All"))],
        slices=[slice_("slice-1", NODE1, "pool-1", device("device-1"), count=2)],
        error=True,
    ),
    Case(
        "all-devices-no-solution",
        claims=[claim("claim-1", req()), claim("claim-0", req(count=None, mode="All"))],
        slices=[one()],
    ),
    Case(
        "all-devices-no-solution-reversed",
        claims=[claim("claim-0", req(count=None, mode="All")), claim("claim-1", req())],
        slices=[one()],
    ),
    Case(
        "all-devices-slice-without-devices",
        claims=[claim("claim-0", req(count=None, mode="All"))],
        slices=[slice_("slice-1", NODE1, "pool-1")],
    ),
    Case("all-devices-no-slices", claims=[claim("claim-0", req(count=None, mode="All"))]),
    Case(
        "all-devices-some-allocated",
        claims=[claim("claim-0", req(count=None, mode="All"))],
        used=[Used("device-1")],
        slices=[slice_("slice-1", NODE1, "pool-1", device("device-1"), device("device-2"))],
    ),
    Case(
        "already-allocated-devices",
        claims=[claim("claim-0", req())],
        used=[Used("device-1"), Used("device-2")],
        slices=[one()],
    ),
    Case(
        "with-constraint",
        claims=[
            claim(
                "claim-0",
                req("req-0"),
                req("req-1"),
                constraints=[
                    match("numa"),
                    match("driverVersion"),
                    match("stringAttribute"),
                    match("boolAttribute"),
                ],
            )
        ],
        slices=[
            slice_(
                "slice-1",
                NODE1,
                "pool-1",
                *(
                    device(
                        name,
                        attributes={
                            "driverVersion": Version("1.0.0"),
                            "numa": 1,
                            "stringAttribute": "stringAttributeValue",
                            "boolAttribute": True,
                        },
                    )
                    for name in ("device-1", "device-2")
                ),
            )
        ],
        expect=[[r("req-0", "device-1"), r("req-1", "device-2")]],
    ),
    Case(
        "with-constraint-non-existent-attribute",
        claims=[claim("claim-0", req(), constraints=[match("NonExistentAttribute")])],
        slices=[one()],
    ),
    *(
        Case(
            name,
            claims=[claim("claim-0", req("req-0", 2), constraints=[match(attribute)])],
            slices=[
                slice_(
                    "slice-1",
                    NODE1,
                    "pool-1",
                    device("device-1", attributes={attribute: a}),
                    device("device-2", attributes={attribute: b}),
                )
            ],
            classes=[device_class(), device_class(CLASS_B, driver=OTHER)],
        )
        for name, attribute, a, b in [
            ("with-constraint-not-matching-int-attribute", "numa", 1, 2),
            (
                "with-constraint-not-matching-string-attribute",
                "stringAttribute",
                "stringAttributeValue",
                "stringAttributeValue2",
            ),
            ("with-constraint-not-matching-bool-attribute", "boolAttribute", True, False),
            (
                "with-constraint-not-matching-version-attribute",
                "driverVersion",
                Version("1.0.0"),
                Version("2.0.0"),
            ),
        ]
    ),
    Case(
        "with-constraint-not-matching-int-attribute-all-devices",
        claims=[claim("claim-0", req("req-0", 0, mode="All"), constraints=[match("numa")])],
        slices=[
            slice_(
                "slice-1",
                NODE1,
                "pool-1",
                device("device-1", attributes={"numa": 1}),
                device("device-2", attributes={"numa": 2}),
            )
        ],
        error=True,
    ),
    Case(
        "with-constraint-for-request",
        claims=[
            claim(
                "claim-0",
                req("req-0"),
                req("req-1"),
                constraints=[match("driverVersion", "req-0")],
            )
        ],
        slices=[
            slice_(
                "slice-1",
                NODE1,
                "pool-1",
                device("device-1", attributes={"driverVersion": Version("1.0.0")}),
                device("device-2", attributes={"driverVersion": Version("2.0.0")}),
            )
        ],
        expect=[[r("req-0", "device-1"), r("req-1", "device-2")]],
    ),
    Case(
        "with-constraint-for-request-retry",
        claims=[
            claim(
                "claim-0",
                req("req-0"),
                req("req-1"),
                constraints=[match("driverVersion", "req-0"), match("stringAttribute")],
            )
        ],
        slices=[
            slice_(
                "slice-1",
                NODE1,
                "pool-1",
                device(
                    "device-1",
                    attributes={"driverVersion": Version("1.0.0"), "stringAttribute": "a"},
                ),
                device(
                    "device-2",
                    attributes={"driverVersion": Version("2.0.0"), "stringAttribute": "b"},
                ),
                device(
                    "device-3",
                    attributes={"driverVersion": Version("3.0.0"), "stringAttribute": "b"},
                ),
            )
        ],
        expect=[[r("req-0", "device-2"), r("req-1", "device-3")]],
    ),
    Case(
        "with-class-device-config",
        claims=[claim("claim-0", req())],
        classes=[device_class(config=share_config(isolation="fixed-share"))],
        slices=[one()],
        expect=[[r("req-0", "device-1")]],
        configs=[[("FromClass", ["req-0"])]],
    ),
    Case(
        "claim-with-device-config",
        claims=[
            claim("claim-0", req(), config=[claim_config(share_config(isolation="fixed-share"))])
        ],
        slices=[one()],
        expect=[[r("req-0", "device-1")]],
        configs=[[("FromClaim", [])]],
    ),
]
