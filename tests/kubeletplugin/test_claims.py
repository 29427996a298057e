"""prepare_claim sizes each share from its allocation and its GpuShareConfig's cores/memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, DriverNames
from dra_driver.kubeletplugin.claims import ClaimError, PreparedClaim, prepare_claim
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.nvml.inventory import Card

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NODE = "node-a"
UID = "6f1c7a3e-2b1d-4c8e-9a4f-0d2e5b7c9a10"
MIB = 2**20
GIB = 2**30
T4 = 15360 * MIB
PATHS = NodePaths(
    plugin_dir=Path("/var/lib/kubelet/plugins") / DEFAULT_DRIVER_NAME,
    cdi_root=Path("/var/run/cdi"),
    driver_root=Path("/"),
    hami_core_library=Path("/usr/local/vgpu/libvgpu.so"),
    mps_pipe_directory=Path("/tmp/nvidia-mps"),
)


def card(memory: int = T4) -> Card:
    return Card(
        uuid="GPU-aaaaaaaa-0000-4000-8000-000000000001",
        product_name="Tesla T4",
        memory_bytes=memory,
        pci_bus_id="0000:3b:00.0",
        minor=0,
        index=0,
        architecture="Turing",
        cuda_compute_capability="7.5",
        driver_version="550.54.15",
    )


def claim(consumed: dict[str, str] | None = None, **fields: str) -> dict[str, Any]:
    """Return a claim allocated gpu-0; a plain device's lacks shareID and consumedCapacity."""
    result: dict[str, Any] = {
        "request": "gpu",
        "driver": NAMES.driver,
        "pool": NODE,
        "device": "gpu-0",
    }
    if consumed is not None:
        result |= {"shareID": "0b6c2f4e-1d3a-4e5f-8a9b-7c6d5e4f3a2b", "consumedCapacity": consumed}
    parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind, **fields}
    config = {"source": "FromClaim", "opaque": {"driver": NAMES.driver, "parameters": parameters}}
    return {
        "metadata": {"name": "c", "namespace": "default", "uid": UID},
        "status": {"allocation": {"devices": {"results": [result], "config": [config]}}},
    }


def prepare(obj: dict[str, Any], gpu: Card | None = None) -> PreparedClaim:
    return prepare_claim(
        NAMES,
        NODE,
        obj,
        cards=[gpu or card()],
        default_backend=Backend.HAMI_CORE,
        host=PATHS.host_paths(UID),
    )


def limits(prepared: PreparedClaim) -> tuple[str, str, int, int]:
    """Return the container's SM and memory limits, and the cores and bytes the monitor trusts."""
    spec = prepared.spec.to_dict()
    edits = [spec.get("containerEdits", {}), spec["devices"][0]["containerEdits"]]
    env = dict(entry.split("=", 1) for edit in edits for entry in edit.get("env", []))
    (share,) = prepared.share.cards
    return (
        env["CUDA_DEVICE_SM_LIMIT_0"],
        env["CUDA_DEVICE_MEMORY_LIMIT_0"],
        share.cores,
        share.memory_bytes,
    )


def test_a_plain_allocation_takes_its_size_from_the_config() -> None:
    """No consumedCapacity, config cores 30 and memory 5Gi: a 30-core, 5120m share."""
    prepared = prepare(claim(cores="30", memory="5Gi"))
    assert limits(prepared) == ("30", "5120m", 30, 5 * GIB)


def test_a_plain_allocation_without_sizes_is_the_whole_card() -> None:
    """No consumedCapacity and no sizes in the config: all cores and all memory."""
    assert limits(prepare(claim())) == ("100", "15360m", 100, T4)


def test_the_config_sets_only_what_it_names() -> None:
    """Config memory alone caps memory; cores stay at the allocation's (the whole card)."""
    assert limits(prepare(claim(memory="2Gi"))) == ("100", "2048m", 100, 2 * GIB)


def test_consumed_capacity_wins_over_a_larger_config() -> None:
    """consumedCapacity 30/5Gi with config 60/10Gi: the limits never exceed what was counted."""
    prepared = prepare(claim({"cores": "30", "memory": "5Gi"}, cores="60", memory="10Gi"))
    assert limits(prepared) == ("30", "5120m", 30, 5 * GIB)


def test_a_smaller_config_caps_consumed_capacity() -> None:
    """consumedCapacity 30/5Gi with config 20/4Gi: the smaller of the two, per field."""
    prepared = prepare(claim({"cores": "30", "memory": "5Gi"}, cores="20", memory="4Gi"))
    assert limits(prepared) == ("20", "4096m", 20, 4 * GIB)


def test_consumed_capacity_without_config_sizes_is_kept() -> None:
    """consumedCapacity 30/5Gi and a config that sets no size: 30 cores and 5Gi."""
    prepared = prepare(claim({"cores": "30", "memory": "5Gi"}, priority="offline"))
    assert limits(prepared) == ("30", "5120m", 30, 5 * GIB)


def test_config_memory_beyond_the_card_is_the_card() -> None:
    """Config memory 64Gi on a 15Gi card without consumedCapacity: the card's memory."""
    assert limits(prepare(claim(memory="64Gi"))) == ("100", "15360m", 100, T4)


def test_exclusive_ignores_the_config_sizes() -> None:
    """Isolation exclusive with cores 30 and memory 5Gi is still the whole card."""
    prepared = prepare(claim(isolation="exclusive", cores="30", memory="5Gi"))
    assert prepared.share.cards[0].cores == 100
    assert prepared.share.cards[0].memory_bytes == T4


def test_exclusive_on_a_card_off_the_mib_grid_is_prepared() -> None:
    """A whole card is the memory its slice offers (whole MiB), so exclusive is not refused."""
    prepared = prepare(claim(isolation="exclusive"), card(T4 + 4096))
    assert prepared.share.cards[0].memory_bytes == T4


def test_exclusive_with_a_partial_allocation_is_still_refused() -> None:
    """Exclusive with consumedCapacity below the card is refused, config sizes or not."""
    with pytest.raises(ClaimError, match="exclusive needs whole cards"):
        prepare(claim({"cores": "30", "memory": "5Gi"}, isolation="exclusive"))


def test_requests_of_one_claim_are_sized_by_their_own_config() -> None:
    """Two plain requests on two cards, configs naming each: each device carries its own size."""
    obj = claim()
    devices = obj["status"]["allocation"]["devices"]
    devices["results"].append({**devices["results"][0], "request": "b", "device": "gpu-1"})
    head = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind}
    devices["config"] = [
        {"source": "FromClaim", "requests": [name], "opaque": {"driver": NAMES.driver,
         "parameters": {**head, "cores": cores, "memory": memory}}}
        for name, cores, memory in (("gpu", "30", "5Gi"), ("b", "50", "1Gi"))
    ]  # fmt: skip
    second = dataclasses.replace(
        card(), uuid="GPU-aaaaaaaa-0000-4000-8000-000000000002", pci_bus_id="0000:af:00.0",
        minor=1, index=1,
    )  # fmt: skip
    prepared = prepare_claim(
        NAMES, NODE, obj, cards=[card(), second], default_backend=Backend.HAMI_CORE,
        host=PATHS.host_paths(UID),
    )  # fmt: skip
    envs = [dict(e.split("=", 1) for e in d.edits.env) for d in prepared.spec.devices]
    assert [(env["CUDA_DEVICE_SM_LIMIT_0"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) for env in envs] == [
        ("30", "5120m"),
        ("50", "1024m"),
    ]


def _env(prepared: PreparedClaim) -> dict[str, str]:
    spec = prepared.spec.to_dict()
    edits = [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]
    return dict(entry.split("=", 1) for edit in edits for entry in edit.get("env", []))


def test_admin_access_sees_the_card_without_interception_or_limits() -> None:
    """An adminAccess result: backend none, no HAMi-core limits, nothing for the monitor."""
    admin = claim()
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    prepared = prepare(admin)
    env = _env(prepared)
    assert env["GPUSHARE_BACKEND"] == "none"
    assert env["GPUSHARE_DEVICE_UUIDS"] == card().uuid
    assert not [name for name in env if name.startswith(("CUDA_DEVICE_MEMORY", "CUDA_DEVICE_SM"))]
    assert "LD_PRELOAD" not in env
    assert prepared.share.cards == ()
    (status,) = prepared.statuses
    assert status.data["adminAccess"] is True
    assert "cores" not in status.data


def test_a_claim_mixing_admin_access_and_a_share_is_refused() -> None:
    """One result adminAccess, one a share: refused, naming why."""
    mixed = claim({"cores": "30", "memory": "1Gi"})
    results = mixed["status"]["allocation"]["devices"]["results"]
    results.append({**results[0], "request": "watch", "adminAccess": True})
    del results[1]["shareID"], results[1]["consumedCapacity"]
    with pytest.raises(ClaimError, match="mixes admin-access results with shares"):
        prepare(mixed)
