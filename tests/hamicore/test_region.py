"""Decoding HAMi-core's shared region: the golden file, and everything it must refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
from hamicore.golden import golden_region, golden_values

from dra_driver.hamicore import REGION_SIZE, RegionError, decode_region, region_to_json
from dra_driver.hamicore.layout import INT32, UINT64, V1_2
from dra_driver.hamicore.report import read_region_file


@pytest.fixture(scope="module")
def golden() -> bytes:
    """Return a region written by HAMi-core's own struct layout, with known values."""
    return golden_region()


def test_the_golden_region_decodes_to_its_known_values(golden: bytes) -> None:
    """Every value HAMi-core's layout put in the golden file comes back, field by field."""
    expected = golden_values()
    decoded = region_to_json(decode_region(golden))
    assert {key: decoded[key] for key in expected} == expected
    assert set(decoded) - set(expected) == {"owner_pid"}


def test_only_the_slots_and_cards_in_use_are_decoded(golden: bytes) -> None:
    """proc_num slots, device_num cards each: the 1,021 empty slots are not reported."""
    region = decode_region(golden)
    assert len(region.procs) == region.proc_num == 3
    assert {len(slot.devices) for slot in region.procs} == {region.device_num} == {2}


def with_int(data: bytes, offset: int, value: int, fmt: str = "i") -> bytes:
    out = bytearray(data)
    (INT32 if fmt == "i" else UINT64).pack_into(out, offset, value)
    return bytes(out)


@pytest.mark.parametrize(
    ("mutate", "kind", "message"),
    [
        (lambda d: d[:-1], "size", "2008951 bytes where a 1.2 region has 2008952"),
        (lambda d: d + b"\0\0", "size", "2008954 bytes where a 1.2 region has 2008952"),
        (lambda d: d[:10], "size", "too short for a region header"),
        (lambda d: with_int(d, 0, 12345), "magic", "initialized_flag 12345 is not"),
        (lambda d: with_int(d, 8, 3), "version", "region version 1.3 is not one of 1.2"),
        (lambda d: with_int(d, 4, 2), "version", "region version 2.2 is not one of 1.2"),
        (lambda d: bytes(len(d)), "uninitialised", "not initialised yet"),
        (lambda d: with_int(d, V1_2.device_num, 17, "Q"), "malformed", "device_num 17"),
        (lambda d: with_int(d, V1_2.proc_num, 1025), "malformed", "proc_num 1025"),
        (lambda d: with_int(d, V1_2.proc_num, -1), "malformed", "proc_num -1"),
    ],
    ids=[
        "truncated", "too-long", "header-only", "foreign-magic", "newer-minor", "newer-major",
        "all-zero", "too-many-cards", "too-many-processes", "negative-processes",
    ],
)  # fmt: skip
def test_a_region_it_does_not_know_is_refused_with_the_reason(
    golden: bytes, mutate: object, kind: str, message: str
) -> None:
    """Wrong size, magic or version, or counts past the arrays: refused, naming why."""
    with pytest.raises(RegionError, match=message) as refused:
        decode_region(mutate(golden))  # type: ignore[operator]
    assert refused.value.kind == kind


def test_a_file_one_byte_past_the_struct_as_libvgpu_makes_it_decodes_the_same(
    golden: bytes,
) -> None:
    """The library's own file is the struct plus one byte: it decodes as the struct alone."""
    assert decode_region(golden + b"\0") == decode_region(golden)


def test_the_region_command_reads_a_file_as_libvgpu_makes_it(golden: bytes, tmp_path: Path) -> None:
    """gpushare-dra region decodes the struct-plus-one-byte file and refuses one byte more."""
    made = tmp_path / "gpu.cache"
    made.write_bytes(golden + b"\0")
    assert read_region_file(made) == decode_region(golden)
    made.write_bytes(golden + b"\0\0")
    with pytest.raises(RegionError, match="2008954 bytes"):
        read_region_file(made)


def test_the_monitor_fields_end_where_the_struct_ends() -> None:
    """last_kernel_time (8 bytes) and sem_postinit (a 32-byte sem_t) close the region."""
    assert REGION_SIZE == V1_2.size == V1_2.last_kernel_time + 8 + 32
