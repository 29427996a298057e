"""What the API server keeps of a ResourceSlice: consumable capacity and device taints.

An API server silently drops the fields of a feature gate that is off, so the publisher asks
before it relies on them: a dry-run create of the first device, sent shareable
(``allowMultipleAllocations``, request policies) and with a taint, shows what would be stored.

- Without ``DRAConsumableCapacity`` (off by default on 1.34/1.35) cards are published as plain
  devices, which the controller shares by the cores and memory of each claim's GpuShareConfig.
- Without ``DRADeviceTaints`` (off by default before 1.36) an unhealthy card cannot be marked,
  so it is left out of the slices as long as it is unhealthy.

Either answer is checked again every ``recheck_seconds`` while it is "no" (a gate turned on
by an upgrade is noticed without a restart) and after every real write (a gate turned off is
noticed at once). Each change is logged, and a change of capacity support is reported to
``on_capacity_change``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, TypedDict, Unpack

from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.errors import ApiError
from dra_driver.k8s.objects import Object
from dra_driver.k8s.reconcile import Requeue
from dra_driver.logging import get_logger
from dra_driver.publishing.slicesync import keeps_capacity, keeps_taints, with_generation

log = get_logger(__name__)

ENABLE_GATE_HINT: Final = (
    "enable the DRAConsumableCapacity feature gate on kube-apiserver, kube-scheduler and "
    "kubelet (alpha in 1.34/1.35, on by default from 1.36)"
)
TAINTS_GATE_HINT: Final = (
    "enable the DRADeviceTaints feature gate on kube-apiserver and kube-scheduler "
    "(alpha in 1.34/1.35, on by default from 1.36)"
)
SHAREABLE_MODE: Final = "consumable-capacity"
PLAIN_MODE: Final = "plain-devices"
_PROBE_TAINT: Final = {"value": "probe", "effect": "NoSchedule"}


def sharing_mode(supported: bool | None) -> str:
    """Say how the cards are published, for ``/readyz`` and the logs."""
    if supported is None:
        return "not known yet (no card published)"
    if supported:
        return f"{SHAREABLE_MODE} (cards are shared by capacity requests)"
    return (
        f"{PLAIN_MODE} (the API server has no DRAConsumableCapacity; the controller shares "
        "cards by GpuShareConfig cores/memory)"
    )


class FeatureOptions(TypedDict, total=False):
    """When :class:`ServerFeatures` asks again, and whom it tells; the publisher passes them on."""

    recheck_seconds: float
    """How long a "no" holds before it is asked again; a minute unless given."""
    on_capacity_unsupported: Callable[[str], None]
    on_capacity_change: Callable[[bool], None]


class ServerFeatures:
    """The publisher's knowledge of what the API server keeps, and when to ask again."""

    def __init__(
        self, api_client: client.ApiClient, taint_key: str, **options: Unpack[FeatureOptions]
    ) -> None:
        self._api_client = api_client
        self._resource = client.ResourceV1Api(api_client)
        self._taint_key = taint_key
        self._recheck_seconds = options.get("recheck_seconds", 60.0)
        self._on_capacity_unsupported = options.get("on_capacity_unsupported")
        self._on_capacity_change = options.get("on_capacity_change")
        self.capacity: bool | None = None
        """Whether consumable-capacity fields are kept; ``None`` until asked."""
        self.taints: bool | None = None
        """Whether device taints are kept; ``None`` until asked."""
        self._next_check = 0.0

    def due(self, *, needs_taints: bool) -> bool:
        """Whether to ask now: never asked, or a "no" that matters is old enough."""
        if self.capacity is None:
            return True
        return self._waiting(needs_taints) and time.monotonic() >= self._next_check

    def recheck_in(self, *, needs_taints: bool) -> float | None:
        """Seconds until the next question, or ``None`` when no answer is waited for."""
        if not self._waiting(needs_taints):
            return None
        return max(self._next_check - time.monotonic(), 0.0)

    def _waiting(self, needs_taints: bool) -> bool:
        """Whether a "no" that matters now may turn into a "yes": what a re-check is for."""
        return self.capacity is False or (needs_taints and self.taints is False)

    def probe(self, slice_: Object) -> None:
        """Create ``slice_``'s first device, shareable and tainted, with dryRun=All."""
        first = dict(slice_["spec"]["devices"][0])
        first["taints"] = [{"key": self._taint_key, **_PROBE_TAINT}]
        sent = with_generation(slice_, 1)
        sent = {**sent, "spec": {**sent["spec"], "devices": [first]}}
        stored = raw.call(self._resource.create_resource_slice, sent, dry_run="All")
        self._next_check = time.monotonic() + self._recheck_seconds
        self._set_taints(supported=keeps_taints(sent, stored))
        self._set_capacity(supported=keeps_capacity(sent, stored))

    def check_kept(self, sent: Object, stored: Object) -> None:
        """After a real write: if a gate went off since the probe, fall back at once."""
        dropped = []
        if not keeps_taints(sent, stored):
            self._set_taints(supported=False)
            dropped.append("device taints")
        if not keeps_capacity(sent, stored):
            self._set_capacity(supported=False)
            dropped.append("consumable-capacity fields")
        if dropped:
            self._next_check = time.monotonic() + self._recheck_seconds
            raise Requeue(0, f"the API server dropped {' and '.join(dropped)}")

    def _set_taints(self, *, supported: bool) -> None:
        previous, self.taints = self.taints, supported
        if previous == supported:
            return
        if supported:
            log.info("slices.device_taints_supported", action="unhealthy cards are tainted")
            return
        log.warning(
            "slices.device_taints_unsupported",
            action=f"unhealthy cards are left out of the slices; to taint them, {TAINTS_GATE_HINT}",
            recheck_seconds=self._recheck_seconds,
        )

    def _set_capacity(self, *, supported: bool) -> None:
        previous, self.capacity = self.capacity, supported
        if previous == supported:
            log.debug("slices.consumable_capacity_unchanged", supported=supported)
            return
        if self._on_capacity_change is not None:
            self._on_capacity_change(supported)
        if supported:
            log.info(
                "slices.consumable_capacity_supported",
                mode=SHAREABLE_MODE,
                action="publishing shareable devices",
            )
            return
        git_version = self._git_version()
        message = (
            f"the API server ({git_version}) drops allowMultipleAllocations and requestPolicy "
            "from ResourceSlice devices, and capacity requests from claims: publishing each card "
            "as a plain device, which the controller shares by the cores and memory of each "
            "claim's GpuShareConfig, until it keeps them; to share cards by capacity requests, "
            f"{ENABLE_GATE_HINT}"
        )
        # A warning: cards are still shared (by config sizes), but capacity requests are not.
        log.warning(
            "slices.consumable_capacity_unsupported",
            mode=PLAIN_MODE,
            git_version=git_version,
            action=ENABLE_GATE_HINT,
            detail=message,
            recheck_seconds=self._recheck_seconds,
        )
        if self._on_capacity_unsupported is not None:
            self._on_capacity_unsupported(message)

    def _git_version(self) -> str:
        try:
            return str(raw.get(self._api_client, "/version/").get("gitVersion") or "unknown")
        except ApiError as exc:
            return f"unknown: {exc}"
