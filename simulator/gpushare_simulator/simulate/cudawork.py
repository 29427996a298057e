"""Simulated CUDA work in the simulated pods: regions written the way ``libvgpu.so`` writes them.

A running container is handed, by its CDI devices, the path of its HAMi-core region
(``CUDA_DEVICE_MEMORY_SHARED_CACHE``) and a mount of its claim's directory on the host. A
:class:`CudaProcess` finds that file the way a container runtime would (through the mount),
creates the region with the container's limits, priority and policy, and, while busy,
launches kernels as the library's rate limiter lets it: a held launch re-checks after a second,
as the library's own loop does. Every 120 ms it reports the SM use the library's watcher would
sample. The kubelet plugin's node monitor decides from these regions; a process only records
what it saw and when, so a report can say how long a suspension or a resume took.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Final

from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.regions import FakeProcess, FakeTask

TICK_SECONDS: Final = 0.02
"""How often a process launches a kernel, and looks at its region, while it runs."""
SAMPLE_SECONDS: Final = 0.12
"""How often the library's watcher samples SM use (its ``g_wait``)."""
HELD_RETRY_SECONDS: Final = 1.0
"""How long the library sleeps before it looks again at a held launch."""
_MIB: Final = 1024 * 1024
_AT_START: Final = {"held": False, "limited": True, "kernels": True}
"""What a process shows before anything happened; a change from it is an event."""


class CudaWorkError(Exception):
    """A pod has no HAMi-core region to write: not running, or not under this backend."""


@dataclasses.dataclass(frozen=True)
class TaskFact:
    """What one pod's CUDA process shows at one moment."""

    pod: str
    busy: bool
    """It wants to launch kernels."""
    held: bool
    """The node monitor suspends it (``recent_kernel == -1``)."""
    limited: bool
    """Its SM limit applies to its launches (else it runs unlimited: a burst, or no limit)."""
    sm_limit: int
    """Its share of the SMs (percent) on its first card."""
    sm_util: int
    """The SM use (percent) it last reported, summed over its cards."""
    memory: int
    """Bytes it holds on its cards; the monitor never touches them."""
    changes: tuple[tuple[float, str], ...]
    """(seconds after the reference moment, what changed), oldest first."""


class CudaProcess:
    """The CUDA work of one container, on its own thread."""

    def __init__(
        self, pod: str, task: FakeTask, memory: Sequence[int], clock: Callable[[], float]
    ) -> None:
        self.pod, self._task, self._clock = pod, task, clock
        self._memory = list(memory)
        self._busy = False
        self._events: list[tuple[float, str]] = []
        self._seen: dict[str, bool] = {}
        self._sm_util = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._report(0)
        self._thread = threading.Thread(target=self._run, name=f"cuda-{pod}", daemon=True)
        self._thread.start()

    def set_busy(self, busy: bool) -> None:
        """Start or stop launching kernels."""
        with self._lock:
            self._busy = busy

    def stop(self) -> None:
        """End the process's thread."""
        self._stop.set()
        self._thread.join(5)

    def fact(self, since: float) -> TaskFact:
        """Return what it shows now, with the changes after ``since`` (a clock reading)."""
        with self._lock:
            changes = tuple((round(t - since, 3), what) for t, what in self._events if t >= since)
            return TaskFact(
                self.pod,
                self._busy,
                self._seen.get("held", _AT_START["held"]),
                self._seen.get("limited", _AT_START["limited"]),
                self._task.sm_limits[0],
                self._sm_util,
                sum(self._memory),
                changes,
            )

    def _run(self) -> None:
        next_sample = next_try = self._clock()
        ran_since_sample = False
        while not self._stop.wait(TICK_SECONDS):
            now = self._clock()
            self._observe(now)
            with self._lock:
                busy = self._busy
            if busy and now >= next_try:
                if self._task.launch():
                    ran_since_sample = True
                    self._note(now, "kernels", True, "kernels run", "kernels held")
                else:
                    next_try = now + HELD_RETRY_SECONDS
                    self._note(now, "kernels", False, "kernels run", "kernels held")
                    ran_since_sample, next_sample = False, now  # nothing runs from now on
            if now >= next_sample:
                limit = self._task.sm_limits[0] if self._task.rate_limited() else 100
                self._report(limit if ran_since_sample else 0)
                ran_since_sample, next_sample = False, now + SAMPLE_SECONDS

    def _observe(self, now: float) -> None:
        self._note(now, "held", self._task.suspended, "held", "resumed")
        self._note(now, "limited", self._task.rate_limited(), "SM limit on", "SM limit off")

    def _note(self, now: float, key: str, value: bool, when_true: str, when_false: str) -> None:
        with self._lock:
            if self._seen.get(key, _AT_START[key]) != value:
                self._events.append((now, when_true if value else when_false))
            self._seen[key] = value

    def _report(self, percent: int) -> None:
        util = [percent] * self._task.cards
        self._task.set_processes([FakeProcess(1, 1, self._memory, util)])
        with self._lock:
            self._sm_util = percent * self._task.cards


class CudaWork:
    """The simulated CUDA processes of a simulated cluster's pods."""

    def __init__(self, cluster: FakeCluster, clock: Callable[[], float] = time.monotonic) -> None:
        self._cluster, self._clock = cluster, clock
        self._processes: dict[tuple[str, str], CudaProcess] = {}

    def set_busy(self, namespace: str, pod: str, busy: bool) -> None:
        """Make the pod's CUDA process launch kernels, or stop; start it the first time."""
        key = (namespace, pod)
        if key not in self._processes:
            self._processes[key] = self._start(namespace, pod)
        self._processes[key].set_busy(busy)

    def facts(self, namespaces: set[str], since: float) -> tuple[TaskFact, ...]:
        """Return every process of ``namespaces``, with its changes after ``since``."""
        return tuple(
            process.fact(since)
            for (namespace, _), process in self._processes.items()
            if namespace in namespaces
        )

    def stop(self, namespaces: set[str] | None = None) -> None:
        """End the processes of ``namespaces`` (``None``: all)."""
        for key in [k for k in self._processes if namespaces is None or k[0] in namespaces]:
            self._processes.pop(key).stop()

    def _start(self, namespace: str, pod: str) -> CudaProcess:
        for kubelet in self._cluster.kubelets.values():
            for (ns, name, _), edits in kubelet.containers.items():
                if (ns, name) == (namespace, pod) and region_env(edits.env):
                    task, memory = fake_task(edits.env, edits.mounts)
                    return CudaProcess(pod, task, memory, self._clock)
        raise CudaWorkError(
            f"pod {namespace}/{pod} runs no container with a HAMi-core region "
            "(CUDA_DEVICE_MEMORY_SHARED_CACHE): is it running, on the hami-core backend?"
        )


def region_env(env: Mapping[str, str]) -> str | None:
    """Return the container's region path, if it is told one."""
    return env.get("CUDA_DEVICE_MEMORY_SHARED_CACHE")


def host_path(container_path: str, mounts: Sequence[Mapping[str, object]]) -> Path:
    """Return where ``container_path`` is on the host, through the innermost mount holding it."""
    wanted = PurePosixPath(container_path)
    best: tuple[PurePosixPath, Path] | None = None
    for mount in mounts:
        target = PurePosixPath(str(mount.get("containerPath", "")))
        if wanted.is_relative_to(target) and (
            best is None or len(target.parts) > len(best[0].parts)
        ):
            best = (target, Path(str(mount.get("hostPath", ""))))
    if best is None:
        raise CudaWorkError(f"no mount of the container holds {container_path}")
    return best[1] / wanted.relative_to(best[0])


def fake_task(
    env: Mapping[str, str], mounts: Sequence[Mapping[str, object]]
) -> tuple[FakeTask, list[int]]:
    """Create the region a container told ``env`` with ``mounts`` gets; return it and its memory.

    The region is where the container's mount puts its ``CUDA_DEVICE_MEMORY_SHARED_CACHE``,
    with the limits, priority and policy it was told; the memory is what its process holds.
    """
    uuids = [u for u in env.get("GPUSHARE_DEVICE_UUIDS", "").split(",") if u]
    try:
        limits = [
            int(env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"].removesuffix("m")) * _MIB
            for i in range(len(uuids))
        ]
        sm_limits = [int(env[f"CUDA_DEVICE_SM_LIMIT_{i}"]) for i in range(len(uuids))]
        priority = int(env["CUDA_TASK_PRIORITY"])
    except (KeyError, ValueError) as exc:
        raise CudaWorkError(f"the container's HAMi-core variables are incomplete: {exc}") from exc
    task = FakeTask(
        host_path(str(region_env(env)), mounts),
        uuids,
        limits=limits,
        sm_limits=sm_limits,
        priority=priority,
        policy=env.get("GPU_CORE_UTILIZATION_POLICY", "default"),
    )
    # It holds half of its share: enough to see in the report that suspension keeps it.
    return task, [limit // 2 for limit in limits]
