"""HAMi-core at the pinned commit builds without a CUDA toolkit, and its region is ours.

No GPU needed: these run wherever GPUSHARE_HAMI_CORE_SRC names the pinned source (skipped
otherwise, as in CI, which has no HAMi-core source).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest
from gpu import hamicore_build

from dra_driver.hamicore.layout import MAGIC, V1_2


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a scratch directory, once the pinned source and the tools are known to be here."""
    try:
        hamicore_build.source()
        hamicore_build.headers(tmp_path_factory.mktemp("probe"))
    except hamicore_build.UnavailableError as exc:
        pytest.skip(str(exc))
    return tmp_path_factory.mktemp("hami-core")


@pytest.fixture(scope="module")
def library(work: Path) -> Path:
    """Build libvgpu.so once for the module."""
    return hamicore_build.build(work / "lib")


def test_the_pinned_source_builds_a_preloadable_libvgpu(library: Path) -> None:
    """libvgpu.so builds from headers off PyPI and exports dlsym and the cu* hooks it hands out."""
    nm = [hamicore_build.tool("nm"), "-D", "--defined-only", str(library)]
    symbols = subprocess.run(nm, capture_output=True, text=True, check=True).stdout
    exported = set(re.findall(r" T (\S+)\n", symbols))
    # Its dlsym finds the hooks by name in the library itself: a hook not exported is never
    # reached, and the library then loads and limits nothing (a Release build of it does so).
    assert {"dlsym", *hamicore_build.HOOKS} <= exported
    needed = subprocess.run([hamicore_build.tool("readelf"), "-d", str(library)],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    # Only the system's and the driver's libraries: nothing of the build is needed at run time.
    allowed = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6",
               "libcuda.so.1", "libnvidia-ml.so.1"}  # fmt: skip
    assert set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", needed)) <= allowed


def test_the_region_layout_the_monitor_reads_is_the_pinned_sources(
    work: Path, library: Path
) -> None:
    """Every offset and size of format 1.2 equals what the library's own header compiles to."""
    compiled = hamicore_build.offsets(work / "offsets", library)
    ours = dataclasses.asdict(V1_2)
    del ours["version"]
    assert {name: compiled[name] for name in ours} == ours
    source = hamicore_build.source() / "src" / "multiprocess" / "multiprocess_memory_limit.h"
    assert str(MAGIC) in source.read_text()
