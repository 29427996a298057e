"""The ResourceSlice builder and the sync planner: pure functions, no API server."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.nvml.inventory import Card, Health
from dra_driver.publishing.slices import (
    card_device,
    desired_slices,
    device_name,
    generate_name,
    slice_labels,
    to_semver,
)
from dra_driver.publishing.slicesync import keeps_capacity, plan_sync, with_generation

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NODE = "node-a"
UID = "5b1c3e2a-7d4f-4c8e-9a1b-0c2d3e4f5a6b"
GI = 1024**3


def card(i: int, **fields: Any) -> Card:
    values: dict[str, Any] = {
        "uuid": f"GPU-00000000-0000-4000-8000-{i:012x}",
        "product_name": "NVIDIA A100-SXM4-80GB",
        "memory_bytes": 80 * GI,
        "pci_bus_id": f"0000:{0x10 + i // 32:02x}:{i % 32:02x}.0",
        "minor": i,
        "index": i % 128,
        "architecture": "Ampere",
        "cuda_compute_capability": "8.0",
        "driver_version": "550.54.15",
        "numa_node": 0,
    }
    values.update(fields)
    return Card(**values)


def names_of(slice_: dict[str, Any]) -> list[str]:
    return [d["name"] for d in slice_["spec"]["devices"]]


def test_device_name_is_gpu_and_minor() -> None:
    """A card's device name is gpu-<minor>, independent of its NVML index."""
    assert device_name(card(3, index=0)) == "gpu-3"


def test_device_has_the_documented_attributes_and_capacities() -> None:
    """One card becomes a device with the attributes and capacities docs/resource-model.md lists."""
    device = card_device(card(0, pci_bus_id="0000:3b:00.0", numa_node=1), NAMES)
    assert device == {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "attributes": {
            "uuid": {"string": "GPU-00000000-0000-4000-8000-000000000000"},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
            "architecture": {"string": "Ampere"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "driverVersion": {"version": "550.54.15"},
            "index": {"int": 0},
            "minor": {"int": 0},
            "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
            "numaNode": {"int": 1},
        },
        "capacity": {
            "cores": {
                "value": "100",
                "requestPolicy": {
                    "default": "100",
                    "validRange": {"min": "0", "max": "100", "step": "1"},
                },
            },
            "memory": {
                "value": "80Gi",
                "requestPolicy": {"default": "80Gi", "validRange": {"min": "1Mi", "step": "1Mi"}},
            },
        },
    }


def test_numa_node_only_when_known() -> None:
    """A card without a known NUMA node has no numaNode attribute (not a made-up value)."""
    assert "numaNode" not in card_device(card(0, numa_node=None), NAMES)["attributes"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.0", "8.0.0"),
        ("12.1", "12.1.0"),
        ("550.54.15", "550.54.15"),
        ("535.104", "535.104.0"),
        ("535.104.05", "535.104.5"),
        ("9", "9.0.0"),
        ("v1.2.3", "1.2.3"),
        ("1.2.3.4", "1.2.3+4"),
        ("1.2.3-rc.1", "1.2.3-rc.1"),
        ("1.2.3-rc.1+b.7", "1.2.3-rc.1+b.7"),
        ("1.2.3.4+b", "1.2.3+b.4"),
        ("1.2.3-01", None),
        ("N/A", None),
        ("", None),
        ("1." + "1" * 70, None),
    ],
)
def test_versions_become_semver(text: str, expected: str | None) -> None:
    """NVML versions become valid semver (padded, leading zeros dropped); junk gives None."""
    assert to_semver(text) == expected


def test_card_versions_are_published_as_semver() -> None:
    """A two-part compute capability and a zero-padded driver version are published as semver."""
    attributes = card_device(
        card(0, cuda_compute_capability="9.0", driver_version="535.104.05"), NAMES
    )["attributes"]
    assert attributes["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attributes["driverVersion"] == {"version": "535.104.5"}


@pytest.mark.parametrize(
    ("memory", "published"),
    [
        (80 * GI, "80Gi"),
        (15360 * 1024**2, "15Gi"),
        (80 * GI + 12345, "80Gi"),
        (40 * GI - 1, "40959Mi"),
    ],
)
def test_memory_is_rounded_down_to_whole_mebibytes(memory: int, published: str) -> None:
    """Memory value and default are the card's bytes rounded down to the 1Mi request grid."""
    capacity = card_device(card(0, memory_bytes=memory), NAMES)["capacity"]["memory"]
    assert capacity["value"] == capacity["requestPolicy"]["default"] == published


def test_devices_are_ordered_by_pci_bus_id() -> None:
    """Devices follow the PCI bus order (domain, bus, device, function), not input or index."""
    cards = [
        card(0, pci_bus_id="0000:af:00.0"),
        card(1, pci_bus_id="0001:00:00.0"),
        card(2, pci_bus_id="0000:3b:00.0"),
        card(3, pci_bus_id="0000:3b:01.0"),
    ]
    (slice_,) = desired_slices(NAMES, NODE, UID, cards)
    assert names_of(slice_) == ["gpu-2", "gpu-3", "gpu-0", "gpu-1"]


def test_unhealthy_cards_are_left_out_where_taints_are_not_kept() -> None:
    """Without a taint effect (taints dropped) an unhealthy card is not published at all."""
    cards = [card(0), card(1, health=Health.UNHEALTHY, health_message="XID 79"), card(2)]
    (slice_,) = desired_slices(NAMES, NODE, UID, cards)
    assert names_of(slice_) == ["gpu-0", "gpu-2"]


def test_slices_split_at_128_devices() -> None:
    """130 cards make two slices of 128 and 2 devices, each counting 2 slices in the pool."""
    slices = desired_slices(NAMES, NODE, UID, [card(i) for i in range(130)])
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 2]
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in slices] == [2, 2]
    assert names_of(slices[0]) + names_of(slices[1]) == [f"gpu-{i}" for i in range(130)]


def test_slices_split_at_a_custom_maximum() -> None:
    """A smaller max_devices chunks the same ordered devices; an invalid one is refused."""
    slices = desired_slices(NAMES, NODE, UID, [card(i) for i in range(5)], max_devices=2)
    assert [names_of(s) for s in slices] == [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"], ["gpu-4"]]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    for bad in (0, 129):
        with pytest.raises(ValueError, match="max_devices"):
            desired_slices(NAMES, NODE, UID, [], max_devices=bad)


@pytest.mark.parametrize("health", [None, Health.UNHEALTHY])
def test_a_node_without_usable_cards_gets_one_empty_slice(health: Health | None) -> None:
    """No cards, or only broken ones, still publish one slice without devices: driver alive."""
    cards = [] if health is None else [card(0, health=health)]
    (slice_,) = desired_slices(NAMES, NODE, UID, cards)
    assert slice_["spec"]["devices"] == []
    assert slice_["spec"]["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 1}


def test_slice_metadata_names_driver_node_and_owner() -> None:
    """Slices are generated per node, labelled with driver and node, and owned by the Node."""
    (slice_,) = desired_slices(NAMES, NODE, UID, [card(0)])
    assert slice_["apiVersion"] == "resource.k8s.io/v1"
    assert slice_["kind"] == "ResourceSlice"
    assert slice_["metadata"] == {
        "generateName": f"{NODE}-{DEFAULT_DRIVER_NAME}-",
        "labels": {
            "app.kubernetes.io/managed-by": DEFAULT_DRIVER_NAME,
            f"{DEFAULT_DRIVER_NAME}/node": NODE,
        },
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": UID, "controller": True}
        ],
    }
    assert slice_["spec"]["driver"] == DEFAULT_DRIVER_NAME
    assert slice_["spec"]["nodeName"] == NODE


def test_long_node_names_keep_names_and_labels_valid() -> None:
    """A 253-character node name gives a short generateName and distinct 63-character labels."""
    long_a = ".".join(["a" * 62] * 4) + "a"
    long_b = long_a[:-1] + "b"
    prefix = generate_name(NAMES, long_a)
    assert len(prefix) <= 58
    assert prefix.endswith("-")
    assert not prefix[:-1].endswith((".", "-"))
    label_a = slice_labels(NAMES, long_a)[f"{DEFAULT_DRIVER_NAME}/node"]
    label_b = slice_labels(NAMES, long_b)[f"{DEFAULT_DRIVER_NAME}/node"]
    assert len(label_a) <= 63
    assert label_a != label_b
    assert label_a[-1].isalnum()


def test_output_is_deterministic() -> None:
    """The same cards in any order give identical slices."""
    cards = [card(i) for i in range(10)]
    assert desired_slices(NAMES, NODE, UID, cards) == desired_slices(
        NAMES, NODE, UID, list(reversed(cards))
    )


@pytest.mark.parametrize("count", [0, 1, 130])
def test_every_slice_validates_against_the_1_36_schema(count: int) -> None:
    """Each produced slice, with a name and generation filled in, passes strict 1.36 validation."""
    for i, slice_ in enumerate(desired_slices(NAMES, NODE, UID, [card(j) for j in range(count)])):
        obj = with_generation(copy.deepcopy(slice_), 1)
        obj["metadata"]["name"] = f"{obj['metadata']['generateName']}{i:05d}"
        kubernetes_validate.validate(obj, "1.36.0", strict=True)


# -- plan_sync -----------------------------------------------------------------------------------


def stored(slice_: dict[str, Any], name: str, generation: int) -> dict[str, Any]:
    obj = with_generation(copy.deepcopy(slice_), generation)
    obj["metadata"].update(name=name, resourceVersion="7", uid=f"uid-{name}")
    return obj


def test_plan_is_empty_when_slices_match() -> None:
    """Stored slices equal to the desired ones (plus server fields) need no write."""
    desired = desired_slices(NAMES, NODE, UID, [card(i) for i in range(130)])
    actual = [stored(s, f"s{i}", 3) for i, s in enumerate(desired)]
    plan = plan_sync(actual, desired, NODE, last_generation=0)
    assert plan.empty
    assert plan.generation == 3


def test_plan_updates_one_changed_slice_in_place() -> None:
    """A change confined to one slice is an update at the same generation."""
    before = desired_slices(NAMES, NODE, UID, [card(i) for i in range(130)])
    after = desired_slices(NAMES, NODE, UID, [card(i) for i in range(129)])
    actual = [stored(s, f"s{i}", 2) for i, s in enumerate(before)]
    plan = plan_sync(actual, after, NODE, last_generation=2)
    assert plan.generation == 2
    assert [
        (current["metadata"]["name"], len(want["spec"]["devices"])) for current, want in plan.update
    ] == [("s1", 1)]
    assert plan.create == plan.delete_first == plan.delete_last == []


def test_plan_bumps_the_generation_when_the_slice_count_changes() -> None:
    """Adding a slice rewrites all slices at max+1 and creates the new one."""
    before = desired_slices(NAMES, NODE, UID, [card(i) for i in range(128)])
    after = desired_slices(NAMES, NODE, UID, [card(i) for i in range(130)])
    plan = plan_sync([stored(before[0], "s0", 4)], after, NODE, last_generation=0)
    assert plan.generation == 5
    assert [c["metadata"]["name"] for c, _ in plan.update] == ["s0"]
    assert [w["spec"]["pool"] for _, w in plan.update] + [
        w["spec"]["pool"] for w in plan.create
    ] == [{"name": NODE, "generation": 5, "resourceSliceCount": 2}] * 2


def test_plan_deletes_old_generations_and_other_pools_first() -> None:
    """Slices of an older generation or another pool are obsolete and deleted before writing."""
    (desired,) = desired_slices(NAMES, NODE, UID, [card(0)])
    foreign = stored(desired, "other", 9)
    foreign["spec"]["pool"]["name"] = "old-pool"
    actual = [stored(desired, "old", 1), stored(desired, "new", 2), foreign]
    plan = plan_sync(actual, [desired], NODE, last_generation=0)
    assert sorted(s["metadata"]["name"] for s in plan.delete_first) == ["old", "other"]
    assert plan.generation == 2
    assert plan.update == []
    assert plan.create == plan.delete_last == []


def test_plan_rewrites_at_a_new_generation_when_all_slices_vanished() -> None:
    """With nothing stored, slices are created above the last generation we wrote."""
    desired = desired_slices(NAMES, NODE, UID, [card(0)])
    plan = plan_sync([], desired, NODE, last_generation=3)
    assert plan.generation == 4
    assert [w["spec"]["pool"]["generation"] for w in plan.create] == [4]


def test_keeps_capacity_notices_stripped_fields() -> None:
    """A stored slice without allowMultipleAllocations or a requestPolicy means the gate is off."""
    (sent,) = desired_slices(NAMES, NODE, UID, [card(0)])
    assert keeps_capacity(sent, copy.deepcopy(sent))
    no_flag = copy.deepcopy(sent)
    del no_flag["spec"]["devices"][0]["allowMultipleAllocations"]
    assert not keeps_capacity(sent, no_flag)
    no_policy = copy.deepcopy(sent)
    del no_policy["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]
    assert not keeps_capacity(sent, no_policy)


@pytest.mark.parametrize("version", ["1.34.0", "1.35.0", "1.36.0", "1.37.0"])
def test_plain_devices_are_valid_and_carry_no_sharing_fields(version: str) -> None:
    """shared=False: capacity values only, no allowMultipleAllocations; valid on every release."""
    (plain,) = desired_slices(NAMES, NODE, UID, [card(0), card(1)], shared=False)
    (shared,) = desired_slices(NAMES, NODE, UID, [card(0), card(1)])
    for device, twin in zip(plain["spec"]["devices"], shared["spec"]["devices"], strict=True):
        assert "allowMultipleAllocations" not in device
        assert (device["name"], device["attributes"]) == (twin["name"], twin["attributes"])
        assert device["capacity"] == {
            name: {"value": capacity["value"]} for name, capacity in twin["capacity"].items()
        }
    kubernetes_validate.validate(plain, version, strict=True)
    # Nothing to keep in a plain slice: it never reads as a gate turned off.
    assert keeps_capacity(plain, copy.deepcopy(plain))
