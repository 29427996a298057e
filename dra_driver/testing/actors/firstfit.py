"""First-fit device allocation with consumable capacity, the way kube-scheduler 1.36 does it.

Pure: (node, claims, slices, classes, allocated state) -> allocations, or a reason. It stands in
for the stock scheduler in tests of a cluster without our controller, so it follows the
scheduler's rules (dra-api.md §3.1) rather than our placement policy: slices in name order,
devices in list order, the first device that fits wins.

Deliberately unsupported, refused with a reason instead of being guessed: CEL selectors other
than ``device.driver == "<name>"`` (joined with ``&&``), and claim constraints. The
real-binaries mode of the harness covers those with a real kube-scheduler.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction
from typing import Any, Final

from dra_driver.k8s.quantity import format_quantity, parse_quantity, quantity_format

Object = dict[str, Any]
DeviceId = tuple[str, str, str]
"""(driver, pool, device)."""

_DRIVER_TERM: Final = re.compile(r"""\s*device\.driver\s*==\s*(["'])([^"']+)\1\s*""")


class Unallocatable(Exception):  # noqa: N818 - a scheduling outcome, not a program error
    """The claims cannot be allocated on this node; the message says why."""


@dataclasses.dataclass
class AllocatedState:
    """What is in use: exclusive devices and the capacity consumed on shared ones."""

    exclusive: set[DeviceId] = dataclasses.field(default_factory=set)
    consumed: dict[DeviceId, dict[str, Fraction]] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_claims(cls, claims: Iterable[Object]) -> AllocatedState:
        """Gather the state from every allocated claim, whoever allocated it."""
        state = cls()
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                if not result.get("adminAccess"):
                    state.add(result)
        return state

    def copy(self) -> AllocatedState:
        """Return an independent copy, to try allocations without committing them."""
        return AllocatedState(set(self.exclusive), {k: dict(v) for k, v in self.consumed.items()})

    def add(self, result: Object) -> None:
        """Count one allocation result as used."""
        device = (result["driver"], result["pool"], result["device"])
        if not result.get("shareID"):
            self.exclusive.add(device)
            return
        used = self.consumed.setdefault(device, {})
        for name, quantity in (result.get("consumedCapacity") or {}).items():
            used[name] = used.get(name, Fraction(0)) + parse_quantity(quantity)


def _selector_driver(selectors: Iterable[Object]) -> str | None:
    driver = None
    for selector in selectors:
        expression = (selector.get("cel") or {}).get("expression", "")
        for term in expression.split("&&"):
            match = _DRIVER_TERM.fullmatch(term)
            if match is None and term.strip() != "true":
                raise Unallocatable(
                    f"the harness scheduler evaluates only device.driver == '<name>' "
                    f"selectors, not {expression!r}"
                )
            if match is not None:
                if driver is not None and driver != match[2]:
                    raise Unallocatable("selectors require two different drivers")
                driver = match[2]
    return driver


def _consumption(device: Object, requests: Mapping[str, str]) -> dict[str, Fraction] | None:
    """Capacity one share takes from ``device``, or None if the request does not fit its policy."""
    capacities: Mapping[str, Object] = device.get("capacity") or {}
    if any(name not in capacities for name in requests):
        return None
    consumed: dict[str, Fraction] = {}
    for name, capacity in capacities.items():
        value = parse_quantity(capacity["value"])
        policy = capacity.get("requestPolicy")
        if name not in requests:
            consumed[name] = parse_quantity(policy["default"]) if policy else value
            continue
        amount = parse_quantity(requests[name])
        if policy and "validRange" in policy:
            limits = policy["validRange"]
            minimum = parse_quantity(limits["min"])
            step = parse_quantity(limits["step"]) if limits.get("step") else None
            if amount < minimum:
                amount = minimum
            elif step:
                steps = -((minimum - amount) // step)  # ceil((amount - min) / step)
                amount = minimum + steps * step
            if limits.get("max") and amount > parse_quantity(limits["max"]):
                return None
        elif policy and "validValues" in policy:
            fitting = [v for v in map(parse_quantity, policy["validValues"]) if v >= amount]
            if not fitting:
                return None
            amount = fitting[0]
        consumed[name] = amount
    return consumed


def _devices(
    node_name: str, driver: str | None, slices: Iterable[Object]
) -> Iterator[tuple[DeviceId, Object]]:
    """Devices of the node's pools at their newest generation, in the scheduler's order."""
    newest: dict[tuple[str, str], int] = {}
    local = [s for s in slices if (s.get("spec") or {}).get("nodeName") == node_name]
    for slice_ in local:
        pool = slice_["spec"]["pool"]
        key = (slice_["spec"]["driver"], pool["name"])
        newest[key] = max(newest.get(key, 0), int(pool.get("generation", 0)))
    for slice_ in sorted(local, key=lambda s: s["metadata"]["name"]):
        spec = slice_["spec"]
        pool = spec["pool"]
        if driver is not None and spec["driver"] != driver:
            continue
        if int(pool.get("generation", 0)) != newest[(spec["driver"], pool["name"])]:
            continue
        for device in spec.get("devices") or []:
            yield (spec["driver"], pool["name"], device["name"]), device


class _Allocator:
    def __init__(
        self, node: str, slices: list[Object], classes: Mapping[str, Object], state: AllocatedState
    ) -> None:
        self.node, self.slices, self.classes = node, slices, classes
        self.state = state.copy()

    def pick(self, name: str, request: Object) -> list[Object]:
        """Take devices for one request; on failure nothing stays taken."""
        before = self.state.copy()
        try:
            return self._pick(name, request)
        except Unallocatable:
            self.state = before
            raise

    def _pick(self, name: str, request: Object) -> list[Object]:
        class_name = request["deviceClassName"]
        device_class = self.classes.get(class_name)
        if device_class is None:
            raise Unallocatable(f"request {name}: device class {class_name} does not exist")
        class_selectors = (device_class.get("spec") or {}).get("selectors") or []
        selectors = [*class_selectors, *(request.get("selectors") or [])]
        driver = _selector_driver(selectors)
        wanted = request.get("capacity", {}).get("requests") or {}
        all_devices = request.get("allocationMode") == "All"
        count = int(request.get("count") or 1)
        results: list[Object] = []
        for device_id, device in _devices(self.node, driver, self.slices):
            if not all_devices and len(results) == count:
                break
            result = self._take(name, device_id, device, wanted)
            if result is not None:
                results.append(result)
        if (all_devices and not results) or (not all_devices and len(results) < count):
            raise Unallocatable(f"request {name}: no device on node {self.node} fits")
        return results

    def _take(
        self, name: str, device_id: DeviceId, device: Object, wanted: Mapping[str, str]
    ) -> Object | None:
        if device_id in self.state.exclusive:
            return None
        result: Object = {
            "request": name,
            "driver": device_id[0],
            "pool": device_id[1],
            "device": device_id[2],
        }
        if not device.get("allowMultipleAllocations"):
            if device_id in self.state.consumed or wanted:
                return None
            self.state.exclusive.add(device_id)
            return result
        consumed = _consumption(device, wanted)
        if consumed is None:
            return None
        used = self.state.consumed.get(device_id, {})
        for capacity, amount in consumed.items():
            limit = parse_quantity(device["capacity"][capacity]["value"])
            if used.get(capacity, Fraction(0)) + amount > limit:
                return None
        result["shareID"] = str(uuid.uuid4())
        result["consumedCapacity"] = {
            capacity: format_quantity(
                amount, quantity_format(device["capacity"][capacity]["value"])
            )
            for capacity, amount in consumed.items()
        }
        self.state.add(result)
        return result


def allocate_on_node(
    node_name: str,
    claims: list[Object],
    slices: list[Object],
    classes: Mapping[str, Object],
    state: AllocatedState,
    *,
    allocation_timestamp: str | None,
) -> list[Object]:
    """Allocate every claim on ``node_name``; return one ``status.allocation`` per claim.

    Raises :class:`Unallocatable` naming the first request that does not fit.
    """
    allocator = _Allocator(node_name, slices, classes, state)
    allocations = []
    for claim in claims:
        devices = (claim.get("spec") or {}).get("devices") or {}
        if devices.get("constraints"):
            raise Unallocatable("the harness scheduler does not evaluate claim constraints")
        results: list[Object] = []
        configs: list[Object] = []
        for request in devices.get("requests") or []:
            chosen = _allocate_request(allocator, request)
            results.extend(chosen)
            request_class = allocator.classes[_request_class(request, chosen[0]["request"])]
            for config in (request_class.get("spec") or {}).get("config") or []:
                configs.append(
                    {"source": "FromClass", "requests": [chosen[0]["request"]], **config}
                )
        for config in devices.get("config") or []:
            configs.append({"source": "FromClaim", **config})
        allocation: Object = {
            "devices": {"results": results, "config": configs},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_name]}
                        ]
                    }
                ]
            },
        }
        if allocation_timestamp is not None:
            allocation["allocationTimestamp"] = allocation_timestamp
        allocations.append(allocation)
    return allocations


def _allocate_request(allocator: _Allocator, request: Object) -> list[Object]:
    if "exactly" in request:
        return allocator.pick(request["name"], request["exactly"])
    reasons = []
    for sub in request.get("firstAvailable") or []:
        try:
            return allocator.pick(f"{request['name']}/{sub['name']}", sub)
        except Unallocatable as exc:
            reasons.append(str(exc))
    raise Unallocatable("; ".join(reasons) or f"request {request['name']}: no alternatives")


def _request_class(request: Object, result_request: str) -> str:
    if "exactly" in request:
        return str(request["exactly"]["deviceClassName"])
    sub_name = result_request.split("/", 1)[1]
    return str(
        next(s for s in request["firstAvailable"] if s["name"] == sub_name)["deviceClassName"]
    )
