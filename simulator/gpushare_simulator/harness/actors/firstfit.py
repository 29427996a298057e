"""First-fit device allocation with consumable capacity, the way kube-scheduler 1.36 does it.

Pure: (node, claims, slices, classes, allocated state) -> allocations, or a reason. It stands in
for the stock scheduler in tests of a cluster without our controller, so it follows the
scheduler's consumable-capacity rules (:mod:`dra_driver.structured.consumable`) rather than
our placement policy: slices in name order, devices in list order, the first device that fits
wins.

Deliberately unsupported, refused with a reason instead of being guessed: CEL selectors other
than ``device.driver == "<name>"`` (joined with ``&&``), and claim constraints. The
real-binaries mode of the harness covers those with a real kube-scheduler. Simplified: a
device without ``allowMultipleAllocations`` is refused to a request naming capacity and while it
has shares, where the scheduler would still allocate it if the capacity check passed.

The consumed-capacity arithmetic and the allocated state are the shared
:mod:`dra_driver.structured` ones, so this counts a share exactly as our controller does.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction
from typing import Final

from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import QuantityError, parse_quantity
from dra_driver.structured.allocated import AllocatedState, DeviceId
from dra_driver.structured.consumable import (
    CapacityRejected,
    consumed_capacity,
    format_consumed,
    parse_capacities,
)

__all__ = ["AllocatedState", "DeviceId", "Object", "Unallocatable", "allocate_on_node"]


_DRIVER_TERM: Final = re.compile(r"""\s*device\.driver\s*==\s*(["'])([^"']+)\1\s*""")


class Unallocatable(Exception):  # noqa: N818 - a scheduling outcome, not a program error
    """The claims cannot be allocated on this node; the message says why."""


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


def _devices(
    node_name: str, driver: str | None, slices: Iterable[Object]
) -> Iterator[tuple[DeviceId, Object]]:
    """Devices of the node's pools at their newest generation, in the scheduler's order."""
    newest: dict[tuple[str, str], int] = {}
    local = [s for s in slices if objects.spec(s).get("nodeName") == node_name]
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
        class_selectors = objects.spec(device_class).get("selectors") or []
        selectors = [*class_selectors, *(request.get("selectors") or [])]
        driver = _selector_driver(selectors)
        try:
            wanted = {
                capacity: parse_quantity(str(quantity))
                for capacity, quantity in (
                    request.get("capacity", {}).get("requests") or {}
                ).items()
            }
        except QuantityError as exc:
            raise Unallocatable(f"request {name}: {exc}") from exc
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
        self, name: str, device_id: DeviceId, device: Object, wanted: Mapping[str, Fraction]
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
            if self.state.in_use(device_id) or wanted:
                return None
            self.state.add_result(result)
            return result
        capacities = parse_capacities(device)
        try:
            consumed = consumed_capacity(capacities, wanted)
        except CapacityRejected:
            return None
        if not self.state.fits(device_id, capacities, consumed):
            return None
        result["shareID"] = str(uuid.uuid4())
        result["consumedCapacity"] = format_consumed(capacities, consumed)
        self.state.add_result(result)
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
        devices = objects.spec(claim).get("devices") or {}
        if devices.get("constraints"):
            raise Unallocatable("the harness scheduler does not evaluate claim constraints")
        results: list[Object] = []
        configs: list[Object] = []
        for request in devices.get("requests") or []:
            chosen = _allocate_request(allocator, request)
            results.extend(chosen)
            request_class = allocator.classes[_request_class(request, chosen[0]["request"])]
            for config in objects.spec(request_class).get("config") or []:
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
