"""The driver's user-space files are found under the driver root, as a node lays them out."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.nvml.driverfiles import DriverFile, find_driver_files

VERSION = "550.54.15"
LIB = "usr/lib/x86_64-linux-gnu"


def driver_tree(root: Path, version: str = VERSION, *, libs: tuple[str, ...] | None = None) -> Path:
    """Lay out a driver install: versioned libraries, their .so.1 and .so links, nvidia-smi."""
    lib = root / LIB
    lib.mkdir(parents=True)
    stems = libs or (
        "libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so",
    )  # fmt: skip
    for stem in stems:
        (lib / f"{stem}.{version}").write_bytes(b"\x7fELF")
        (lib / f"{stem}.1").symlink_to(f"{stem}.{version}")
        (lib / stem).symlink_to(f"{stem}.1")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_bytes(b"\x7fELF")
    return root


def test_each_library_is_mounted_under_its_versioned_and_its_soname(tmp_path: Path) -> None:
    """libcuda.so.550.54.15 is the file; it appears in the container under both names."""
    root = driver_tree(tmp_path / "driver")
    found = find_driver_files(root, VERSION)
    real = str(root / LIB / f"libcuda.so.{VERSION}")
    assert DriverFile(real, f"/{LIB}/libcuda.so.{VERSION}") in found.files
    assert DriverFile(real, f"/{LIB}/libcuda.so.1") in found.files
    assert DriverFile(str(root / "usr/bin/nvidia-smi"), "/usr/bin/nvidia-smi") in found.files
    assert found.missing == ()
    assert found.library_dirs == (f"/{LIB}",)
    # Symlinks are never mounted themselves: only regular files, at container paths.
    assert all(not Path(f.host_path).is_symlink() for f in found.files)


def test_the_running_drivers_version_wins_over_a_leftover(tmp_path: Path) -> None:
    """With two versions installed, NVML's version picks the file."""
    root = driver_tree(tmp_path / "driver")
    (root / LIB / "libcuda.so.535.161.08").write_bytes(b"\x7fELF")
    found = find_driver_files(root, VERSION)
    cuda = {f.container_path: f.host_path for f in found.files}
    assert cuda[f"/{LIB}/libcuda.so.1"].endswith(f"libcuda.so.{VERSION}")


def test_missing_required_files_are_named(tmp_path: Path) -> None:
    """Without libcuda and NVML the node cannot run CUDA: they are listed as missing."""
    root = driver_tree(tmp_path / "driver", libs=("libnvidia-ptxjitcompiler.so",))
    (root / "usr/bin/nvidia-smi").unlink()
    assert find_driver_files(root, VERSION).missing == (
        "libcuda.so", "libnvidia-ml.so", "nvidia-smi",
    )  # fmt: skip


def test_a_file_resolving_outside_the_driver_root_is_ignored(tmp_path: Path) -> None:
    """A binary that is a symlink out of the driver root is not handed to containers."""
    root = driver_tree(tmp_path / "driver")
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"#!/bin/sh\n")
    (root / "usr/bin/nvidia-smi").unlink()
    (root / "usr/bin/nvidia-smi").symlink_to(outside)
    found = find_driver_files(root, VERSION)
    assert "nvidia-smi" in found.missing
    assert all(str(outside) != f.host_path for f in found.files)


@pytest.mark.parametrize("version", [None, "fake"])
def test_without_a_known_version_the_installed_one_is_taken(
    tmp_path: Path, version: str | None
) -> None:
    """No version from NVML: the one versioned file present is used."""
    root = driver_tree(tmp_path / "driver")
    found = find_driver_files(root, version)
    assert any(f.container_path == f"/{LIB}/libcuda.so.1" for f in found.files)
