"""Region files are opened without trusting them: hostile files are refused, never written."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest
from hamicore.golden import golden_file

from dra_driver.hamicore import RegionError
from dra_driver.hamicore.layout import INT32, V1_2
from dra_driver.hamicore.regionfile import RegionFile, RegionRead


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    return golden_file(tmp_path / "golden.cache")


def test_the_golden_region_reads_as_the_monitor_needs_it(golden: Path) -> None:
    """Cards with limits, summed use over the three processes, and the two switches."""
    region = RegionFile.open(golden)
    try:
        read = region.read()
    finally:
        region.close()
    assert [card.uuid for card in read.cards] == [
        "GPU-4b56cb71-7424-5684-9f9d-6b522f839e9e",
        "GPU-fb98fefd-d57a-5152-aa06-0fa05bc5be92",
    ]
    assert [(c.memory_limit, c.sm_limit) for c in read.cards] == [(5 << 30, 40), (8 << 30, 30)]
    assert [c.memory_used for c in read.cards] == [
        1384120320 + 2768240640 + 4152360960,
        2432696320 + 4865392640 + 7298088960,
    ]
    assert [c.sm_util for c in read.cards] == [10 + 20 + 30, 11 + 21 + 31]
    assert (read.processes, read.recent_kernel, read.utilization_switch, read.priority) == (
        3, 2, 1, 1,
    )  # fmt: skip


def test_a_file_as_libvgpu_makes_it_is_read_and_written(golden: Path) -> None:
    """The library's file, the struct plus one byte, is served like the struct alone."""
    golden.write_bytes(golden.read_bytes() + b"\0")
    region = RegionFile.open(golden)
    try:
        read = region.read()
        region.write(-1, 0)
    finally:
        region.close()
    assert read.processes == 3
    assert [c.sm_util for c in read.cards] == [10 + 20 + 30, 11 + 21 + 31]
    after = golden.read_bytes()
    assert len(after) == V1_2.size + 1
    assert INT32.unpack_from(after, V1_2.recent_kernel)[0] == -1


def read_after_exits(golden: Path, slots: Iterable[int]) -> RegionRead:
    """End the processes of ``slots`` as the library does (pid and status 0); read the file."""
    data = bytearray(golden.read_bytes())
    for index in slots:
        INT32.pack_into(data, V1_2.slot(index) + V1_2.slot_pid, 0)
        INT32.pack_into(data, V1_2.slot(index) + V1_2.slot_status, 0)
    golden.write_bytes(bytes(data))
    region = RegionFile.open(golden)
    try:
        return region.read()
    finally:
        region.close()


def test_the_slot_of_a_process_that_exited_counts_for_nothing(golden: Path) -> None:
    """A slot whose pid the library zeroed at exit keeps its figures; they are not summed."""
    read = read_after_exits(golden, [0])
    assert [c.memory_used for c in read.cards] == [
        2768240640 + 4152360960,
        4865392640 + 7298088960,
    ]
    assert [c.sm_util for c in read.cards] == [20 + 30, 21 + 31]


def test_a_region_whose_processes_all_exited_shows_no_use(golden: Path) -> None:
    """Every pid zeroed, nobody compacting the slots: no memory and no SM use, so not busy."""
    read = read_after_exits(golden, range(3))
    assert [(c.memory_used, c.sm_util) for c in read.cards] == [(0, 0), (0, 0)]


def test_a_write_changes_the_two_monitor_fields_and_nothing_else(golden: Path) -> None:
    """recent_kernel and utilization_switch change in place; every other byte stays."""
    before = golden.read_bytes()
    region = RegionFile.open(golden)
    region.read()
    region.write(-1, 0)
    region.close()
    after = golden.read_bytes()
    assert INT32.unpack_from(after, V1_2.recent_kernel)[0] == -1
    assert INT32.unpack_from(after, V1_2.utilization_switch)[0] == 0
    changed = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
    fields = range(V1_2.utilization_switch, V1_2.recent_kernel + 4)
    assert changed
    assert all(i in fields for i in changed)


def test_a_symlink_is_refused_and_its_target_untouched(golden: Path, tmp_path: Path) -> None:
    """A region name pointing elsewhere (a host file, say) is not followed."""
    link = tmp_path / "evil.cache"
    link.symlink_to(golden)
    before = golden.read_bytes()
    with pytest.raises(RegionError, match="not a regular file"):
        RegionFile.open(link)
    assert golden.read_bytes() == before


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO with nobody at the other end neither blocks the monitor nor is opened for I/O."""
    fifo = tmp_path / "fifo.cache"
    os.mkfifo(fifo)
    done = threading.Event()

    def attempt() -> None:
        with pytest.raises(RegionError, match="not a regular file"):
            RegionFile.open(fifo)
        done.set()

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    assert done.wait(5)


def test_a_hard_link_is_refused(golden: Path, tmp_path: Path) -> None:
    """A second name for a file (a host file linked in, say) is not a region."""
    os.link(golden, tmp_path / "twin.cache")
    with pytest.raises(RegionError, match="2 hard links"):
        RegionFile.open(golden)


@pytest.mark.parametrize("size", [0, 100, V1_2.size - 1, V1_2.size + 2, V1_2.size + 4096])
def test_a_file_of_the_wrong_size_is_never_written(golden: Path, size: int) -> None:
    """Truncated or padded: read refuses it, and write refuses to touch it."""
    data = golden.read_bytes()
    golden.write_bytes(data[:size] if size < len(data) else data + bytes(size - len(data)))
    before = golden.read_bytes()
    region = RegionFile.open(golden)
    with pytest.raises(RegionError):
        region.read()
    with pytest.raises(RegionError, match="never written"):
        region.write(-1, 0)
    region.close()
    assert golden.read_bytes() == before


def test_a_region_truncated_after_it_was_read_fails_its_next_read(golden: Path) -> None:
    """A container truncating its region under the monitor costs a refusal, not a crash."""
    region = RegionFile.open(golden)
    region.read()
    os.truncate(golden, 4096)
    with pytest.raises(RegionError):
        region.read()
    with pytest.raises(RegionError, match="never written"):
        region.write(-1, 0)
    region.close()
    assert golden.stat().st_size == 4096


def test_an_unknown_version_is_never_written(golden: Path) -> None:
    """A region of a newer library format is read no further than its header."""
    data = bytearray(golden.read_bytes())
    INT32.pack_into(data, 8, 9)  # minor version 9
    golden.write_bytes(bytes(data))
    region = RegionFile.open(golden)
    with pytest.raises(RegionError, match=r"region version 1\.9") as refused:
        region.read()
    assert refused.value.kind == "version"
    with pytest.raises(RegionError):
        region.write(-1, 0)
    region.close()
    assert golden.read_bytes() == bytes(data)
