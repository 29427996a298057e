"""The NVIDIA driver's user-space files a container needs, found under the driver root.

CUDA and NVML are not in container images: they come with the driver, and must match the
kernel module's version exactly. So each prepared claim's CDI spec mounts them read-only
from the node, at the paths they have there, as NVIDIA's own runtime does:

- ``libcuda.so``: the CUDA driver API every CUDA program loads;
- ``libnvidia-ml.so``: NVML, for ``nvidia-smi``, monitoring libraries and HAMi-core's hooks;
- ``libnvidia-ptxjitcompiler.so``: compiles PTX for the card when a program loads it;
- ``libnvidia-nvvm.so``: NVVM, for link-time optimisation and JIT-compiled CUDA C++;
- ``libnvidia-gpucomp.so``: loaded by ``libcuda`` from driver 545 on;
- ``nvidia-smi``: what everyone runs first to see the card.

Each library is mounted under its versioned name and again under its ``.so.1`` name, the one
programs ``dlopen``: no symlink has to be created inside the container. Only regular files are
taken, and a name that resolves outside the driver root is ignored.
"""

from __future__ import annotations

import dataclasses
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Final

LIBRARIES: Final = (
    "libcuda.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",
)
REQUIRED: Final = ("libcuda.so", "libnvidia-ml.so")
"""Without these no CUDA program starts; the others are needed by some."""
BINARIES: Final = ("nvidia-smi",)
LIBRARY_DIRS: Final = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "lib/x86_64-linux-gnu",
    "lib64",
    "usr/lib",
)
BINARY_DIRS: Final = ("usr/bin", "usr/sbin", "bin")
_VERSIONED: Final = re.compile(r"\.so\.[0-9]+(\.[0-9]+)+$")


@dataclasses.dataclass(frozen=True)
class DriverFile:
    """A file to mount read-only: where it is on the host, and where the container sees it."""

    host_path: str
    container_path: str


@dataclasses.dataclass(frozen=True)
class DriverFiles:
    """What was found, and which required names were not."""

    files: tuple[DriverFile, ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def library_dirs(self) -> tuple[str, ...]:
        """Container directories holding the libraries (for an ld.so cache update)."""
        dirs = (str(Path(f.container_path).parent) for f in self.files if ".so" in f.container_path)
        return tuple(dict.fromkeys(dirs))


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (OSError, ValueError):
        return False
    return True


def _versioned(directory: Path, stem: str, version: str | None) -> Path | None:
    """Return the real file of library ``stem`` in ``directory`` (of ``version`` if known)."""
    wanted = directory / f"{stem}.{version}" if version else None
    if wanted is not None and _regular(wanted):
        return wanted
    try:
        names = sorted(path.name for path in directory.iterdir())
    except OSError:
        return None
    candidates = [directory / n for n in names if n.startswith(f"{stem}.") and _VERSIONED.search(n)]
    regular = [c for c in candidates if _regular(c)]
    return regular[-1] if regular else None


def find_driver_files(driver_root: Path, version: str | None = None) -> DriverFiles:
    """Look for the driver's libraries and binaries under ``driver_root``.

    ``version`` (the driver version NVML reports) picks the library files of the running
    driver when several are installed.
    """
    files: list[DriverFile] = []
    found: set[str] = set()
    for stem in LIBRARIES:
        for relative in LIBRARY_DIRS:
            real = _versioned(driver_root / relative, stem, version)
            if real is None or not _inside(real, driver_root):
                continue
            container_dir = "/" + relative
            files.append(DriverFile(str(real), f"{container_dir}/{real.name}"))
            files.append(DriverFile(str(real), f"{container_dir}/{stem}.1"))
            found.add(stem)
            break
    for name in BINARIES:
        for relative in BINARY_DIRS:
            candidate = driver_root / relative / name
            if candidate.is_file() and _inside(candidate, driver_root):
                real = candidate.resolve()
                files.append(DriverFile(str(real), f"/{relative}/{name}"))
                found.add(name)
                break
    missing = tuple(name for name in (*REQUIRED, *BINARIES) if name not in found)
    return DriverFiles(tuple(files), missing)


def describe(files: Iterable[DriverFile]) -> list[str]:
    """Return ``container path <- host path`` lines, for a log."""
    return [f"{f.container_path} <- {f.host_path}" for f in files]
