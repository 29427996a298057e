"""NVML's list of processes on the cards: host PIDs, or None when NVML cannot say."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from dra_driver.nvml import processes


def _nvml(
    monkeypatch: pytest.MonkeyPatch, compute: list[list[int]], graphics: list[list[int]]
) -> None:
    """Make pynvml report ``compute``/``graphics`` PIDs per card index."""
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(compute))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda index: index)
    for name, lists in (
        ("nvmlDeviceGetComputeRunningProcesses", compute),
        ("nvmlDeviceGetGraphicsRunningProcesses", graphics),
    ):
        monkeypatch.setattr(
            pynvml,
            name,
            lambda handle, lists=lists: [SimpleNamespace(pid=p) for p in lists[handle]],
        )


def test_the_pids_of_every_card_and_both_lists_are_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cards, compute and graphics processes: one set of host PIDs."""
    _nvml(monkeypatch, compute=[[1001, 1002], [2001]], graphics=[[], [1002, 3001]])
    assert processes.running_pids() == frozenset({1001, 1002, 2001, 3001})


def test_a_failing_call_means_unknown_not_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    """An NVML error gives None, so no live process is ever taken for dead."""
    _nvml(monkeypatch, compute=[[1001]], graphics=[[]])

    def fails(handle: int) -> list[object]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetGraphicsRunningProcesses", fails)
    assert processes.running_pids() is None
