"""Simulated CUDA work: regions where the container's mount puts them, launches as the library's."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gpushare_simulator.harness.actors.cdiresolve import ContainerEdits
from gpushare_simulator.simulate import cudawork
from gpushare_simulator.simulate.cudawork import CudaWork, CudaWorkError, TaskFact, host_path

from dra_driver.hamicore.region import decode_region
from dra_driver.hamicore.regionfile import RegionFile

MIB = 1024 * 1024
UUID = "GPU-26975e32-62e5-543b-ac29-e97c231c6291"


def container(host_dir: Path, policy: str = "default", priority: str = "1") -> ContainerEdits:
    edits = ContainerEdits()
    edits.env.update({
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/cache/gpu.cache",
        "GPUSHARE_DEVICE_UUIDS": UUID,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "8192m",
        "CUDA_DEVICE_SM_LIMIT_0": "40",
        "CUDA_TASK_PRIORITY": priority,
        "GPU_CORE_UTILIZATION_POLICY": policy,
    })  # fmt: skip
    edits.mounts += [
        {"hostPath": "/usr/lib/libvgpu.so", "containerPath": "/usr/local/vgpu/libvgpu.so"},
        {"hostPath": str(host_dir), "containerPath": "/usr/local/vgpu/cache"},
    ]
    return edits


def cluster(**containers: ContainerEdits) -> Any:
    """Stand in for the harness: one node whose kubelet ran these containers (pods ns/<name>)."""
    kubelet = SimpleNamespace(containers={("ns", name, "c"): c for name, c in containers.items()})
    return SimpleNamespace(kubelets={"node-1": kubelet})


def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def monitor_sets(path: Path, recent_kernel: int, utilization_switch: int) -> None:
    """Write the two fields as the node monitor does: read first, then write."""
    region = RegionFile.open(path)
    try:
        region.read()
        region.write(recent_kernel, utilization_switch)
    finally:
        region.close()


def only(work: CudaWork, since: float = 0.0) -> TaskFact:
    (fact,) = work.facts({"ns"}, since)
    return fact


@pytest.fixture
def work() -> Any:
    started: list[CudaWork] = []

    def make(**containers: ContainerEdits) -> CudaWork:
        started.append(CudaWork(cluster(**containers)))
        return started[-1]

    yield make
    for each in started:
        each.stop()


def test_host_path_follows_the_innermost_mount() -> None:
    """The region's container path maps through the deepest mount holding it; none: an error."""
    mounts = [
        {"hostPath": "/host/usr", "containerPath": "/usr"},
        {"hostPath": "/var/lib/claims/u1", "containerPath": "/usr/local/vgpu/cache"},
    ]
    assert host_path("/usr/local/vgpu/cache/gpu.cache", mounts) == Path(
        "/var/lib/claims/u1/gpu.cache"
    )
    with pytest.raises(CudaWorkError, match="no mount of the container holds /tmp/x"):
        host_path("/tmp/x", mounts)


def test_the_region_carries_the_containers_limits_priority_and_half_its_memory(
    tmp_path: Path, work: Any
) -> None:
    """The file is created on the host with the limits and priority the container was told."""
    simulated = work(batch=container(tmp_path))
    simulated.set_busy("ns", "batch", True)
    region = decode_region((tmp_path / "gpu.cache").read_bytes())
    assert (region.uuids, region.limit, region.sm_limit) == ((UUID,), (8192 * MIB,), (40,))
    assert region.priority == 1
    assert region.procs[0].devices[0].total == 4096 * MIB
    assert only(simulated).memory == 4096 * MIB


def test_a_pod_without_a_region_is_refused_by_name(tmp_path: Path, work: Any) -> None:
    """A pod not told a HAMi-core region (another backend, or not running) is named."""
    with pytest.raises(CudaWorkError, match="pod ns/other runs no container with a HAMi-core"):
        work(batch=container(tmp_path)).set_busy("ns", "other", True)


def test_a_held_process_stops_and_runs_again_after_the_librarys_recheck(
    tmp_path: Path, work: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held by the region: SM use 0 and events in order; released: kernels after the re-check."""
    monkeypatch.setattr(cudawork, "HELD_RETRY_SECONDS", 0.3)
    simulated = work(batch=container(tmp_path))
    simulated.set_busy("ns", "batch", True)
    until(lambda: only(simulated).sm_util == 40)  # limited: it uses its share
    since = time.monotonic()
    monitor_sets(tmp_path / "gpu.cache", -1, 1)
    until(lambda: only(simulated, since).held and only(simulated, since).sm_util == 0)
    monitor_sets(tmp_path / "gpu.cache", 0, 1)
    until(lambda: [w for _, w in only(simulated, since).changes][-1:] == ["kernels run"])
    changes = only(simulated, since).changes
    assert [what for _, what in changes] == ["held", "kernels held", "resumed", "kernels run"]
    resumed, ran = changes[2][0], changes[3][0]
    assert 0 <= ran - resumed <= 0.3 + 0.1  # the library looks again at most this late


def test_a_burst_lifts_the_limit_of_default_only(tmp_path: Path, work: Any) -> None:
    """Switch 0: policy default runs unlimited (no marks, all SMs); force stays limited."""
    burst, fixed = tmp_path / "burst", tmp_path / "fixed"
    burst.mkdir()
    fixed.mkdir()
    simulated = work(b=container(burst), f=container(fixed, policy="force"))
    for pod, directory in (("b", burst), ("f", fixed)):
        simulated.set_busy("ns", pod, True)
        monitor_sets(directory / "gpu.cache", 0, 0)

    def facts() -> dict[str, TaskFact]:
        return {fact.pod: fact for fact in simulated.facts({"ns"}, 0.0)}

    until(lambda: not facts()["b"].limited and facts()["b"].sm_util == 100)
    assert "SM limit off" in [what for _, what in facts()["b"].changes]
    assert facts()["f"].limited
