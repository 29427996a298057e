"""On a real GPU: what a claim asks for happens, under HAMi-core built from the pinned source.

Each test prepares a real claim on the node's first card with the kubelet plugin's own code
(the card from NVML, the CDI spec from ``prepare_claim``), resolves the devices' edits as a
container runtime would, and runs ``cudaprobe.py`` with that environment, ``libvgpu.so``
preloaded (what the spec's ``/etc/ld.so.preload`` mount does in a container) and only the
claim's card visible. Skipped without NVML and a GPU, or without the HAMi-core source (see
``hamicore_build``). With ``GPUSHARE_GPU_RESULTS`` set, the figures are written there as JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu import hamicore_build
from gpushare_simulator.harness.actors.cdiresolve import resolve
from gpushare_simulator.simulate.cudawork import host_path

from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, DriverNames
from dra_driver.cdi import atomic_write_json, spec_file_name
from dra_driver.kubeletplugin.claims import prepare_claim
from dra_driver.kubeletplugin.entries import ClaimRef
from dra_driver.kubeletplugin.monitor import MonitoredClaim, RegionMonitor
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.nvml.inventory import Card
from dra_driver.nvml.real import NvmlCardSource
from dra_driver.nvml.source import DiscoveryError
from dra_driver.publishing.slices import device_name

pytestmark = pytest.mark.gpu

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NODE = "gpu-node"
PROBE = Path(__file__).with_name("cudaprobe.py")
GIB = 1024**3
RESULTS: dict[str, Any] = {}


@pytest.fixture(scope="module")
def card() -> Iterator[Card]:
    """Return the node's first card, read through NVML as the plugin reads it."""
    source = NvmlCardSource()
    try:
        source.start()
    except DiscoveryError as exc:
        pytest.skip(f"no NVIDIA GPU here: {exc}")
    try:
        cards = source.discover().cards
        if not cards:
            pytest.skip("NVML reports no readable card")
        yield cards[0]
    finally:
        source.stop()
        path = os.environ.get("GPUSHARE_GPU_RESULTS")
        if path and RESULTS:
            Path(path).write_text(json.dumps({"card": cards[0].product_name, **RESULTS}, indent=2))


@pytest.fixture(scope="module")
def libvgpu(card: Card, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build HAMi-core at the pinned commit (only once a GPU is known to be here)."""
    try:
        return hamicore_build.build(tmp_path_factory.mktemp("hami-core"))
    except hamicore_build.UnavailableError as exc:
        pytest.skip(str(exc))


class Node:
    """The plugin's directories on this machine, and claims prepared into them."""

    def __init__(self, root: Path, card: Card, library: Path) -> None:
        self.card, self.library = card, library
        self.paths = NodePaths(
            plugin_dir=root / "plugin", cdi_root=root / "cdi", driver_root=Path("/"),
            hami_core_library=library, mps_pipe_directory=root / "mps",
        )  # fmt: skip
        self.paths.cdi_root.mkdir(parents=True)
        Path("/tmp/vgpulock").mkdir(mode=0o1777, exist_ok=True)
        self.claims: list[MonitoredClaim] = []

    def prepare(self, cores: int, memory: int, isolation: str, priority: str) -> dict[str, str]:
        """Prepare a claim of this share; return the environment its container would get."""
        uid = str(uuid.uuid4())
        parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind,
                      "isolation": isolation, "priority": priority}  # fmt: skip
        claim = {
            "metadata": {"name": f"claim-{uid[:8]}", "namespace": "gpu", "uid": uid},
            "status": {"allocation": {"devices": {
                "results": [{"request": "gpu", "driver": NAMES.driver, "pool": NODE,
                             "device": device_name(self.card), "shareID": str(uuid.uuid4()),
                             "consumedCapacity": {"cores": str(cores), "memory": str(memory)}}],
                "config": [{"source": "FromClaim",
                            "opaque": {"driver": NAMES.driver, "parameters": parameters}}],
            }}},
        }  # fmt: skip
        host = self.paths.host_paths(uid)
        prepared = prepare_claim(NAMES, NODE, claim, cards=[self.card],
                                 default_backend=Backend.HAMI_CORE, host=host)  # fmt: skip
        host.hami_cache_dir.mkdir(parents=True, mode=0o777)
        atomic_write_json(self.paths.cdi_root / spec_file_name(NAMES, uid), prepared.spec.to_dict())
        edits = resolve(prepared.devices[0].cdi_device_ids, [self.paths.cdi_root])
        self.claims.append(
            MonitoredClaim(ClaimRef("gpu", uid, claim["metadata"]["name"]), prepared.share)
        )
        region = host_path(edits.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], edits.mounts)
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            **edits.env,
            "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region),
            "LD_PRELOAD": str(self.library),
            "CUDA_VISIBLE_DEVICES": self.card.uuid,
        }

    def monitor(self) -> RegionMonitor:
        """Return a node monitor over the claims prepared here."""
        return RegionMonitor(self.paths.hami_claims_dir, lambda: list(self.claims))


@pytest.fixture
def node(tmp_path: Path, card: Card, libvgpu: Path) -> Node:
    """Return a fresh node directory on the GPU machine."""
    return Node(tmp_path, card, libvgpu)


def probe(env: dict[str, str], *args: str, timeout: float = 120) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(PROBE), *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@contextlib.contextmanager
def spinning(env: dict[str, str], seconds: float, progress: Path) -> Iterator[Spinner]:
    """Run the probe's ``spin`` for ``seconds``; kill it on the way out if it still runs.

    Its output goes to a file beside ``progress``, not to a pipe: nobody reads a pipe while
    it spins, and a full one would stall it.
    """
    log = progress.with_suffix(".log")
    argv = [sys.executable, str(PROBE), "spin", str(seconds), str(progress)]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield Spinner(process, log)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


@dataclasses.dataclass(frozen=True)
class Spinner:
    """A running ``spin`` probe and the file its output goes to."""

    process: subprocess.Popen[bytes]
    log: Path

    def finish(self, timeout: float = 30) -> None:
        """Wait for the probe to end on its own; it must succeed."""
        code = self.process.wait(timeout)
        assert code == 0, f"the probe exited {code}:\n{self.log.read_text()[-2000:]}"


def count(progress: Path) -> int:
    try:
        return int(progress.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def utilisation(card: Card, seconds: float) -> list[int]:
    """GPU utilisation NVML reports over ``seconds``, sampled every 200 ms (percent)."""
    import pynvml  # noqa: PLC0415 - only where NVML is known to work

    handle = pynvml.nvmlDeviceGetHandleByUUID(card.uuid)
    samples, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        time.sleep(0.2)
    return samples


def mean(samples: list[int]) -> float:
    return sum(samples) / len(samples)


def test_allocating_past_the_memory_limit_fails(node: Node) -> None:
    """A 1Gi share allocates up to 1Gi and then gets out-of-memory; without libvgpu it would not."""
    env = node.prepare(30, GIB, "fixed-share", "online")
    unlimited = probe({k: v for k, v in env.items() if k != "LD_PRELOAD"}, "alloc", "1024")
    assert unlimited["allocated_bytes"] == 2 * GIB  # the probe itself can go past the limit
    limited = probe(env, "alloc", "1024")
    RESULTS["memory_limit"] = {"limit_bytes": GIB, **limited}
    assert limited["allocated_bytes"] <= GIB
    assert limited["allocated_bytes"] >= GIB // 2
    assert limited["failed_with"] == 2  # CUDA_ERROR_OUT_OF_MEMORY


def test_fixed_share_30_keeps_the_card_at_most_40_percent_busy(node: Node, tmp_path: Path) -> None:
    """The probe alone fills the card; as a 30-core fixed-share it stays at or under 40 %."""
    env = node.prepare(30, 2 * GIB, "fixed-share", "online")
    free_env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    with spinning(free_env, 12, tmp_path / "free") as free:
        time.sleep(3)
        alone = utilisation(node.card, 6)
        free.finish()
    with spinning(env, 16, tmp_path / "limited") as limited:
        time.sleep(5)  # the limiter settles on its share
        shared = utilisation(node.card, 8)
        limited.finish()
    RESULTS["fixed_share_30"] = {
        "unlimited_percent": round(mean(alone), 1),
        "limited_percent": round(mean(shared), 1),
        "limited_samples": shared,
    }
    assert mean(alone) >= 90
    assert mean(shared) <= 40


def test_offline_work_is_held_while_online_work_is_busy(node: Node, tmp_path: Path) -> None:
    """Offline kernels stop within ~1 s of online work starting and run again after it ends."""
    offline_env = node.prepare(50, 2 * GIB, "burst-share", "offline")
    online_env = node.prepare(50, 2 * GIB, "burst-share", "online")
    monitor = node.monitor()
    monitor.start()
    offline_progress, online_progress = tmp_path / "offline", tmp_path / "online"
    figures: dict[str, float] = {}
    RESULTS["priority"] = figures  # filled as each is measured: a failure still reports them
    try:
        with spinning(offline_env, 40, offline_progress):
            _until(lambda: count(offline_progress) > 20, 30, "offline work never ran")
            started = time.monotonic()
            with spinning(online_env, 8, online_progress) as online:
                _until(lambda: count(online_progress) > 0, 30, "online work never ran")
                figures["offline_held_after_s"] = _stalled(offline_progress, 1.0, 10) - started
                before = count(offline_progress)
                time.sleep(2)
                assert count(offline_progress) == before  # still held while online runs
                online.finish()
            ended = time.monotonic()
            _until(lambda: count(offline_progress) > before, 10, "offline work was never resumed")
            figures["offline_running_again_after_s"] = time.monotonic() - ended
    finally:
        monitor.stop()
    assert figures["offline_held_after_s"] <= 3.0
    assert figures["offline_running_again_after_s"] <= 4.0


def _until(condition: Any, seconds: float, failure: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.05)


def _stalled(progress: Path, window: float, seconds: float) -> float:
    """Return when ``progress`` stopped moving (it then stays still for ``window`` s)."""
    deadline, last, since = time.monotonic() + seconds, count(progress), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = count(progress)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= window:
            return since
    raise AssertionError("offline work was never held")
