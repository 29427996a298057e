"""status.devices entries of a prepared claim, and the background writer's choices."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dra_driver.k8s.errors import ConflictError, ForbiddenError
from dra_driver.kubeletplugin.devicestatus import (
    DeviceStatus,
    StatusReporter,
    device_entries,
    merged,
)

Object = dict[str, Any]
DRIVER = "gpushare.dra.dev"
NOW = "2026-11-28T06:00:00Z"
SHARE = DeviceStatus("node-a", "gpu-0", "5d0b3c2e-0000-4000-8000-000000000001", {"cores": 30})


def test_entries_are_keyed_as_kubernetes_keys_them_and_ready() -> None:
    """driver, pool, device, shareID; one Ready condition; data as given; no shareID if whole."""
    whole = DeviceStatus("node-a", "gpu-1", None, {"cores": 100})
    share, card = device_entries(DRIVER, [SHARE, whole], NOW, "node-a")
    assert (share["driver"], share["pool"], share["device"], share["shareID"]) == (
        DRIVER, "node-a", "gpu-0", SHARE.share_id,
    )  # fmt: skip
    assert "shareID" not in card
    assert share["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "Prepared",
         "message": "prepared on node node-a", "lastTransitionTime": NOW},
    ]  # fmt: skip
    assert share["data"] == {"cores": 30}


def test_other_drivers_entries_are_kept_and_ours_replaced() -> None:
    """A NIC driver's entry stays; our stale entry gives way to the new one."""
    nic = {"driver": "nic.example.com", "pool": "p", "device": "eth0"}
    stale = {"driver": DRIVER, "pool": "node-a", "device": "gpu-9"}
    fresh = device_entries(DRIVER, [SHARE], NOW, "node-a")
    assert merged([nic, stale], DRIVER, fresh) == [nic, *fresh]


class Api:
    """A claim and the patches sent for it; ``fail`` raises on the next patches, in order."""

    def __init__(self, *, allocated: bool = True, uid: str = "u1") -> None:
        status: Object = {"allocation": {"devices": {"results": []}}} if allocated else {}
        status["devices"] = [{"driver": "nic.example.com", "pool": "p", "device": "eth0"}]
        self.claim: Object = {
            "metadata": {"name": "c", "namespace": "ns", "uid": uid, "resourceVersion": "7"},
            "status": status,
        }
        self.patches: list[Object] = []
        self.fail: list[Exception] = []

    def get(self, namespace: str, name: str) -> Object:
        return json.loads(json.dumps(self.claim))

    def patch(self, namespace: str, name: str, body: Object) -> Object:
        self.patches.append(body)
        if self.fail:
            raise self.fail.pop(0)
        return self.claim


def reporter(api: Api) -> StatusReporter:
    return StatusReporter(
        DRIVER, "node-a", get_claim=api.get, patch_status=api.patch, now=lambda: NOW
    )


def test_a_report_is_written_with_the_claims_resource_version() -> None:
    """One merge patch: the resourceVersion read, the other driver's entry, then ours."""
    api = Api()
    writer = reporter(api)
    writer.report("ns", "c", "u1", [SHARE])
    writer._reconcile(("ns", "c"))
    (body,) = api.patches
    assert body["metadata"] == {"resourceVersion": "7"}
    assert [e["driver"] for e in body["status"]["devices"]] == ["nic.example.com", DRIVER]
    writer._reconcile(("ns", "c"))  # written: nothing pending, nothing sent again
    assert len(api.patches) == 1


@pytest.mark.parametrize("api", [Api(allocated=False), Api(uid="another")])
def test_a_claim_deallocated_or_replaced_gets_no_status(api: Api) -> None:
    """The claim the kubelet prepared is gone (another UID) or no longer allocated: no write."""
    writer = reporter(api)
    writer.report("ns", "c", "u1", [SHARE])
    writer._reconcile(("ns", "c"))
    assert api.patches == []


def test_a_conflict_is_retried_and_a_refusal_is_not() -> None:
    """409 propagates (the loop retries at once); 403 is logged and the report dropped."""
    api = Api()
    writer = reporter(api)
    writer.report("ns", "c", "u1", [SHARE])
    api.fail = [ConflictError("stale", status=409)]
    with pytest.raises(ConflictError):
        writer._reconcile(("ns", "c"))
    api.fail = [ForbiddenError("no /driver permission", status=403)]
    writer._reconcile(("ns", "c"))
    writer._reconcile(("ns", "c"))
    assert len(api.patches) == 2
