"""Build HAMi-core's ``libvgpu.so`` from source, with CUDA headers from PyPI and no CUDA toolkit.

The source is a directory named by ``GPUSHARE_HAMI_CORE_SRC``: a git checkout of
:data:`PINNED_COMMIT`, or an export of it with the commit in a file named ``COMMIT``
(``git archive <commit> | tar -x -C DIR && echo <commit> > DIR/COMMIT``). The headers
(``cuda.h``, ``nvml.h``) come from the packages of the ``gpu`` dependency group
(``nvidia-cuda-runtime-cu12``, ``nvidia-nvml-dev-cu12``). The library links against
``libcuda`` and ``libnvidia-ml`` but finds every symbol at run time, so empty stand-ins with
the drivers' sonames are enough to link it: no driver is needed to build, only to run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

PINNED_COMMIT: Final = "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811"
"""HAMi-core 2.8.2's region format 1.2, per-card SM limits: what the node monitor is built for."""
SOURCE_ENV: Final = "GPUSHARE_HAMI_CORE_SRC"
_OPTIONS: Final = (
    "-DDLSYM_HOOK_ENABLE=1",
    "-DMULTIPROCESS_LIMIT_ENABLE=1",
    "-DHOOK_MEMINFO_ENABLE=1",
    "-DHOOK_NVML_ENABLE=1",
    # Debug, as HAMi-core's own build.sh: its Release flags add -fvisibility=hidden, which
    # leaves dlsym the only export, and that dlsym hands out the cu* hooks by looking their
    # names up in the library itself: a Release build loads, and intercepts nothing.
    "-DCMAKE_BUILD_TYPE=Debug",
    # HAMi-core asks for CMake 2.8.11; CMake 4 refuses a minimum under 3.5 unless told this.
    "-DCMAKE_POLICY_VERSION_MINIMUM=3.5",
)
HOOKS: Final = ("cuInit", "cuMemAlloc_v2", "cuLaunchKernel", "cuGetProcAddress_v2")
"""Hooks the library must export: the memory limit, the SM limit, and the way into the rest."""


class UnavailableError(Exception):
    """What the build needs is not here; the message says what and how to provide it."""


def source() -> Path:
    """Return the pinned HAMi-core source directory, or raise :class:`UnavailableError`."""
    configured = os.environ.get(SOURCE_ENV)
    if not configured:
        raise UnavailableError(f"set {SOURCE_ENV} to a HAMi-core source tree at {PINNED_COMMIT}")
    root = Path(configured)
    if (root / ".git").exists():
        done = subprocess.run([tool("git"), "-C", str(root), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=False)  # fmt: skip
        commit = done.stdout.strip()
    elif (root / "COMMIT").is_file():
        commit = (root / "COMMIT").read_text().strip()
    else:
        raise UnavailableError(f"{root} is not a git checkout and has no COMMIT file")
    if commit != PINNED_COMMIT:
        raise UnavailableError(f"{root} is at {commit or 'an unknown commit'}, not {PINNED_COMMIT}")
    return root


def headers(into: Path) -> Path:
    """Gather ``cuda.h`` and ``nvml.h`` from the PyPI packages into ``into/include``."""
    spec = importlib.util.find_spec("nvidia")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    include = into / "include"
    include.mkdir(parents=True, exist_ok=True)
    for package, header in (("cuda_runtime", "cuda.h"), ("nvml_dev", "nvml.h")):
        found = [
            r / package / "include" for r in roots if (r / package / "include" / header).is_file()
        ]
        if not found:
            raise UnavailableError(f"no {header}: install the gpu group (pip install --group gpu)")
        shutil.copytree(found[0], include, dirs_exist_ok=True)
    return into


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise UnavailableError(f"{name} is not installed (apt-get install cmake gcc make git)")
    return found


def stubs(into: Path) -> Path:
    """Compile empty ``libcuda.so`` and ``libnvidia-ml.so`` carrying the drivers' sonames."""
    into.mkdir(parents=True, exist_ok=True)
    empty = into / "empty.c"
    empty.write_text("")
    for name, soname in (("libcuda.so", "libcuda.so.1"), ("libnvidia-ml.so", "libnvidia-ml.so.1")):
        subprocess.run([tool("gcc"), "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o",
                        str(into / name), str(empty)], check=True)  # fmt: skip
    return into


def build(work: Path) -> Path:
    """Build ``libvgpu.so`` in ``work`` (the source tree is copied, never written); return it."""
    tree = work / "src"
    shutil.copytree(source(), tree, ignore=shutil.ignore_patterns(".git", "build"))
    cuda_home, linked = headers(work / "cuda"), stubs(work / "stubs")
    out = work / "build"
    out.mkdir()
    env = {**os.environ, "CUDA_HOME": str(cuda_home)}
    cmake = [tool("cmake"), str(tree), *_OPTIONS, f"-DCMAKE_SHARED_LINKER_FLAGS=-L{linked}"]
    for argv in (cmake, [tool("make"), f"-j{os.cpu_count() or 2}", "vgpu"]):
        done = subprocess.run(argv, cwd=out, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
    library = out / "libvgpu.so"
    if not library.is_file():
        raise RuntimeError(f"the build made no {library}")
    return library


def offsets(work: Path, library: Path) -> dict[str, int]:
    """Compile a program against the header ``library`` was built with; return its layout."""
    fields = ("owner_pid", "device_num", "uuids", "limit", "sm_limit", "procs", "proc_num",
              "utilization_switch", "recent_kernel", "priority", "last_kernel_time")  # fmt: skip
    slot = ("pid", "hostpid", "used", "monitorused", "device_util", "status")
    lines = [f'printf("{f} %zu\\n", offsetof(shared_region_t, {f}));' for f in fields]
    lines += [f'printf("slot_{f} %zu\\n", offsetof(shrreg_proc_slot_t, {f}));' for f in slot]
    lines += [
        'printf("size %zu\\n", sizeof(shared_region_t));',
        'printf("slot_size %zu\\n", sizeof(shrreg_proc_slot_t));',
        'printf("memory_size %zu\\n", sizeof(device_memory_t));',
        'printf("memory_total %zu\\n", offsetof(device_memory_t, total));',
        'printf("util_size %zu\\n", sizeof(device_util_t));',
        'printf("util_sm %zu\\n", offsetof(device_util_t, sm_util));',
    ]
    work.mkdir(parents=True, exist_ok=True)
    program = work / "offsets.c"
    program.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n"
        '#include "multiprocess/multiprocess_memory_limit.h"\n'
        "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n"
    )
    binary, tree = work / "offsets", library.parent.parent / "src"
    include = headers(work / "cuda") / "include"
    subprocess.run([tool("gcc"), "-D_GNU_SOURCE", f"-I{tree / 'src'}", f"-I{include}",
                    f"-I{library.parent / 'config'}", "-o", str(binary), str(program)],
                   check=True, capture_output=True)  # fmt: skip
    output = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    return {name: int(value) for name, value in (line.split() for line in output.splitlines())}
