"""A ResourceClaim's ``spec.devices`` as the engine searches it: requests, alternatives, rules.

Everything that can be checked without looking at devices is checked here, once per claim,
so a bad claim gets one clear reason instead of "nothing fits" on every node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

from dra_driver.api import (
    ConfigError,
    DriverNames,
    EffectiveConfig,
    Isolation,
)
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import QuantityError, parse_quantity
from dra_driver.structured import cel
from dra_driver.structured.classes import (
    class_driver,
    device_entries,
    only_driver_term,
    spec_uses_driver,
)
from dra_driver.structured.config import applies_to, share_config
from dra_driver.structured.configshares import config_amounts

MAX_RESULTS: Final = 32
"""The most devices one claim's allocation may list (the API server refuses more)."""


class ClaimRefused(Exception):  # noqa: N818 - an outcome the user must act on
    """The claim can never be allocated as written; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class Alternative:
    """One way to satisfy a request: the request itself or one ``firstAvailable`` entry."""

    name: str
    """The result's ``request`` field: ``gpu`` or ``gpu/<sub-request>``."""
    class_name: str
    selectors: tuple[cel.Selector, ...]
    """Class selectors first, then the request's."""
    all_devices: bool
    count: int
    capacity: Mapping[str, Fraction]
    """The capacity requests, or the amounts the config's ``cores`` and ``memory`` give."""
    tolerations: tuple[Object, ...]
    config: EffectiveConfig
    class_config: tuple[Object, ...]
    """The class's config entries, copied into the allocation as ``FromClass``."""
    admin: bool = False
    """``adminAccess``: the card is seen, not shared out; in use or not, nothing is counted."""

    @property
    def exclusive(self) -> bool:
        """Whether each share takes its whole card (``isolation: exclusive``)."""
        return self.config.isolation is Isolation.EXCLUSIVE

    @property
    def sized(self) -> bool:
        """Whether the config gives the size: such a share may go on a whole-only card."""
        return self.config.sized


@dataclasses.dataclass(frozen=True)
class Request:
    """One entry of ``spec.devices.requests``."""

    name: str
    alternatives: tuple[Alternative, ...]


@dataclasses.dataclass(frozen=True)
class Constraint:
    """A ``matchAttribute`` or ``distinctAttribute`` constraint."""

    requests: tuple[str, ...]
    attribute: str
    distinct: bool

    def covers(self, request: str) -> bool:
        """Whether the constraint applies to a result of ``request`` (``gpu`` or ``gpu/sub``)."""
        return applies_to(self.requests, request)


@dataclasses.dataclass(frozen=True)
class ClaimSpec:
    """A parsed claim, ready to search."""

    key: str
    """``namespace/name`` for messages."""
    uid: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    claim_config: tuple[Object, ...]


def claim_key(claim: Mapping[str, Any]) -> str:
    """Return ``namespace/name`` of a claim."""
    metadata = objects.metadata(claim)
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def class_names(claim: Mapping[str, Any]) -> set[str]:
    """Return the DeviceClass names the claim's requests and alternatives ask for."""
    return {
        str(entry["deviceClassName"])
        for _, _, entry in device_entries(claim.get("spec") or {})
        if entry.get("deviceClassName")
    }


def uses_driver(claim: Mapping[str, Any], classes: Mapping[str, Object], driver: str) -> bool:
    """Whether any request of the claim asks for a DeviceClass of ``driver``."""
    return spec_uses_driver(claim.get("spec") or {}, classes, driver)


def _selectors(entries: Sequence[Object], where: str) -> tuple[cel.Selector, ...]:
    selectors = []
    for index, entry in enumerate(entries):
        expression = str((entry.get("cel") or {}).get("expression") or "")
        try:
            selectors.append(cel.compile_selector(expression))
        except cel.CelError as exc:
            raise ClaimRefused(f"{where}.selectors[{index}]: {exc}") from exc
    return tuple(selectors)


def _capacity(entry: Object, where: str) -> dict[str, Fraction]:
    wanted = {}
    for name, text in ((entry.get("capacity") or {}).get("requests") or {}).items():
        try:
            amount = parse_quantity(str(text))
        except QuantityError as exc:
            raise ClaimRefused(f"{where}.capacity.requests[{name}]: {exc}") from exc
        if amount < 0:
            raise ClaimRefused(f"{where}.capacity.requests[{name}]: must not be negative")
        wanted[str(name)] = amount
    return wanted


def _alternative(
    names: DriverNames,
    classes: Mapping[str, Object],
    claim_config: Sequence[Object],
    *,
    entry: Object,
    result_name: str,
    where: str,
) -> Alternative:
    class_name = str(entry.get("deviceClassName", ""))
    device_class = classes.get(class_name)
    if device_class is None:
        raise ClaimRefused(f"{where}: device class {class_name} does not exist")
    if class_driver(device_class) != names.driver:
        raise ClaimRefused(
            f"{where}: device class {class_name} does not select devices of {names.driver} "
            "only; a claim must ask either for this driver's classes alone or not at all"
        )
    mode = str(entry.get("allocationMode") or "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise ClaimRefused(f"{where}.allocationMode: {mode!r}; allowed: ExactCount, All")
    count = int(entry.get("count") or 1)
    if mode == "ExactCount" and count < 1:
        raise ClaimRefused(f"{where}.count: must be at least 1")
    tolerations = tuple(entry.get("tolerations") or ())
    if not all(isinstance(t, dict) for t in tolerations):
        raise ClaimRefused(f"{where}.tolerations: each entry must be an object")
    class_spec = objects.spec(device_class)
    class_config = tuple(
        {"source": "FromClass", "requests": [result_name], **config}
        for config in class_spec.get("config") or []
    )
    try:
        config = share_config(
            [*class_config, *({"source": "FromClaim", **c} for c in claim_config)],
            names,
            result_name,
            path="config",
        ).effective()
    except ConfigError as exc:
        raise ClaimRefused(f"{where}: {exc}") from exc
    capacity = _capacity(entry, where)
    if config.sized:
        if capacity:
            raise ClaimRefused(
                f"{where}.capacity: the request's {names.config_kind} sets cores or memory "
                "too; give the share's size in one place, the capacity requests or the "
                "config's cores and memory"
            )
        capacity = config_amounts(config)
    return Alternative(
        name=result_name,
        class_name=class_name,
        selectors=tuple(
            # The engine only ever sees this driver's devices, so a class selector that only
            # names the driver holds for all of them: running it would cost a CEL evaluation
            # per device.
            selector
            for selector in _selectors(
                class_spec.get("selectors") or [], f"deviceclass {class_name}"
            )
            if not only_driver_term(selector.expression, names.driver)
        )
        + _selectors(entry.get("selectors") or [], where),
        all_devices=mode == "All",
        count=count,
        capacity=capacity,
        tolerations=tolerations,
        config=config,
        class_config=class_config,
        admin=bool(entry.get("adminAccess")),
    )


def parse_claim(
    claim: Mapping[str, Any], names: DriverNames, classes: Mapping[str, Object]
) -> ClaimSpec:
    """Parse and check one claim; raise :class:`ClaimRefused` naming the field at fault."""
    devices = objects.spec(claim).get("devices") or {}
    claim_config = tuple(devices.get("config") or ())
    requests = []
    for index, request in enumerate(devices.get("requests") or []):
        name = str(request.get("name", ""))
        where = f"spec.devices.requests[{index}]"
        alternatives: tuple[Alternative, ...]
        if request.get("exactly") is not None:
            alternatives = (
                _alternative(
                    names,
                    classes,
                    claim_config,
                    entry=request["exactly"],
                    result_name=name,
                    where=f"{where}.exactly",
                ),
            )
        else:
            alternatives = tuple(
                _alternative(
                    names,
                    classes,
                    claim_config,
                    entry=sub,
                    result_name=f"{name}/{sub.get('name', '')}",
                    where=f"{where}.firstAvailable[{sub_index}]",
                )
                for sub_index, sub in enumerate(request.get("firstAvailable") or [])
            )
        if not alternatives:
            raise ClaimRefused(f"{where}: needs exactly or firstAvailable")
        requests.append(Request(name, alternatives))
    if not requests:
        raise ClaimRefused("spec.devices.requests: the claim requests no devices")
    if len({a.admin for request in requests for a in request.alternatives}) > 1:
        # Prepared once per claim: a card seen for monitoring is not limited, a share is.
        raise ClaimRefused(
            "spec.devices.requests: adminAccess is set on some requests and not on others; "
            "ask for admin access and for shares in separate claims"
        )
    # "All" counts one here: how many it takes depends on the node, checked by the search.
    fewest = sum(
        min(1 if a.all_devices else a.count for a in request.alternatives) for request in requests
    )
    if fewest > MAX_RESULTS:
        raise ClaimRefused(
            f"spec.devices.requests: the claim asks for at least {fewest} devices; an "
            f"allocation can list at most {MAX_RESULTS}: split it into several claims"
        )
    constraints = []
    for index, entry in enumerate(devices.get("constraints") or []):
        attribute = entry.get("matchAttribute") or entry.get("distinctAttribute")
        if not attribute:
            raise ClaimRefused(
                f"spec.devices.constraints[{index}]: needs matchAttribute or distinctAttribute"
            )
        constraints.append(
            Constraint(
                requests=tuple(entry.get("requests") or ()),
                attribute=str(attribute),
                distinct=bool(entry.get("distinctAttribute")),
            )
        )
    metadata = objects.metadata(claim)
    return ClaimSpec(
        key=claim_key(claim),
        uid=str(metadata.get("uid", "")),
        requests=tuple(requests),
        constraints=tuple(constraints),
        claim_config=claim_config,
    )


def results_after(
    requests: Sequence[tuple[int, str, Sequence[Alternative]]], chosen: Sequence[int]
) -> list[int]:
    """Per position, the results the same claim's later requests need with ``chosen``.

    ``requests`` are ``(claim index, label, alternatives)`` in search order; ``chosen`` is the
    alternative each uses. An ``allocationMode: All`` alternative needs at least one.
    """
    claims = [claim for claim, _, _ in requests]
    needs = [
        1 if alternatives[index].all_devices else alternatives[index].count
        for (_, _, alternatives), index in zip(requests, chosen, strict=True)
    ]
    paired = list(zip(claims, needs, strict=True))
    return [
        sum(need for other, need in paired[at + 1 :] if other == claim)
        for at, claim in enumerate(claims)
    ]
