"""A small CUDA program for the GPU suite, driving libcuda through ctypes (no compiler needed).

Run as a process of its own, so that ``libvgpu.so`` (``LD_PRELOAD``) intercepts its calls the
way it would a container's, with the environment the test hands it:

    python cudaprobe.py alloc LIMIT_MIB         # allocate 64 MiB at a time: how far did it get?
    python cudaprobe.py spin SECONDS PROGRESS   # launch busy kernels; count them in PROGRESS

``alloc`` stops at the first failed allocation or at twice LIMIT_MIB and prints one JSON line.
``spin`` launches kernels that keep every SM busy for about a millisecond each, as fast as it
is allowed, and rewrites PROGRESS with the number done every 50 ms.

Each kernel is many short blocks rather than a few long ones: 32 waves of blocks that fill
every SM, each spinning for 1/32 of the kernel. HAMi-core's SM limiter charges one token per
block at each launch, and its bucket holds 32 tokens per thread slot of the card (32 x 2,048
x 132 on an H100 or H200): that is 256 such kernels, a fifth of a second of work, so the
limiter's control loop (every 120 ms) governs within a second. With 4 blocks per SM of a
millisecond each, a full bucket paid for over ten seconds of kernels, and a 30 % limit was
measured at 70 % over the test's window.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path

# A kernel that spins on the SM's cycle counter for as many cycles as its argument says.
_PTX = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 cycles)
{
  .reg .u64 %rd<5>;
  .reg .pred %p;
  ld.param.u64 %rd1, [cycles];
  mov.u64 %rd2, %clock64;
LOOP:
  mov.u64 %rd3, %clock64;
  sub.u64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p, %rd4, %rd1;
  @%p bra LOOP;
  ret;
}
"""
_MIB = 1024 * 1024
_CHUNK = 64 * _MIB
_ATTRIBUTE_SM_COUNT = 16  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
_ATTRIBUTE_THREADS_PER_SM = 39  # CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
_THREADS = 256  # per block
_WAVES = 32  # of blocks filling every SM, per kernel
_KERNEL_CYCLES = 1_500_000  # SM clock cycles a kernel keeps every SM busy: ~0.8 ms at 1.9 GHz


def _context() -> ctypes.CDLL:
    cuda = ctypes.CDLL("libcuda.so.1")
    _check(cuda, cuda.cuInit(0), "cuInit")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    _check(cuda, cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    _check(cuda, cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
    return cuda


def _check(cuda: ctypes.CDLL, result: int, call: str) -> None:
    if result != 0:
        sys.stdout.write(json.dumps({"error": call, "code": result}) + "\n")
        sys.exit(3)


def alloc(limit_mib: int) -> None:
    cuda = _context()
    allocated, code = 0, 0
    while allocated < 2 * limit_mib * _MIB:
        pointer = ctypes.c_uint64()
        code = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(_CHUNK))
        if code != 0:
            break
        allocated += _CHUNK
    sys.stdout.write(json.dumps({"allocated_bytes": allocated, "failed_with": code}) + "\n")


def spin(seconds: float, progress: Path) -> None:
    cuda = _context()
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    _check(cuda, cuda.cuModuleLoadData(ctypes.byref(module), _PTX), "cuModuleLoadData")
    _check(cuda, cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin"), "get")
    sms, threads = ctypes.c_int(), ctypes.c_int()
    _check(cuda, cuda.cuDeviceGetAttribute(ctypes.byref(sms), _ATTRIBUTE_SM_COUNT, 0), "attr")
    _check(cuda, cuda.cuDeviceGetAttribute(ctypes.byref(threads), _ATTRIBUTE_THREADS_PER_SM, 0),
           "attr")  # fmt: skip
    blocks = _WAVES * sms.value * (threads.value // _THREADS)  # 33,792 on an H100 or H200
    cycles = ctypes.c_uint64(_KERNEL_CYCLES // _WAVES)
    arguments = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(cycles), ctypes.c_void_p))
    done, written, end = 0, 0.0, time.monotonic() + seconds
    while time.monotonic() < end:
        launch = cuda.cuLaunchKernel(function, blocks, 1, 1, _THREADS, 1, 1, 0, None,
                                     arguments, None)  # fmt: skip
        _check(cuda, launch, "cuLaunchKernel")
        _check(cuda, cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        done += 1
        if time.monotonic() - written > 0.05:
            progress.with_suffix(".tmp").write_text(str(done))
            progress.with_suffix(".tmp").replace(progress)
            written = time.monotonic()


if __name__ == "__main__":
    if sys.argv[1] == "alloc":
        alloc(int(sys.argv[2]))
    else:
        spin(float(sys.argv[2]), Path(sys.argv[3]))
