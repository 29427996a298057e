"""prepare_claim: what each share of a claim is, from its allocation."""

from __future__ import annotations

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


def test_exclusive_on_a_card_off_the_mib_grid_is_prepared() -> None:
    """A whole card is the memory its slice offers (whole MiB), so exclusive is not refused."""
    prepared = prepare(claim(isolation="exclusive"), card(T4 + 4096))
    assert prepared.share.cards[0].memory_bytes == T4


def test_exclusive_with_a_partial_allocation_is_still_refused() -> None:
    """Exclusive with consumedCapacity below the card is refused, config sizes or not."""
    with pytest.raises(ClaimError, match="exclusive needs whole cards"):
        prepare(claim({"cores": "30", "memory": "5Gi"}, isolation="exclusive"))
