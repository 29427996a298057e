"""Regression tests for review findings in the kubelet plugin's prepare path."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest

from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, DriverNames
from dra_driver.cdi import spec_file_name
from dra_driver.cdi.spec import StagedFile
from dra_driver.k8s.errors import NotFoundError
from dra_driver.kubeletplugin import checkpoint as checkpoint_module
from dra_driver.kubeletplugin.checkpoint import Checkpoint
from dra_driver.kubeletplugin.entries import ClaimEntry, ClaimRef, ClaimState
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.kubeletplugin.state import ClaimPreparer
from dra_driver.nvml.inventory import Card

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
DRIVER = NAMES.driver
NODE = "node-a"
NAMESPACE = "default"


def _card(minor: int, bus: int) -> Card:
    return Card(
        uuid=f"GPU-aaaaaaaa-0000-4000-8000-{minor + 1:012x}",
        product_name="Tesla T4",
        memory_bytes="15360Mi",  # type: ignore[arg-type]  # Card normalises quantities
        pci_bus_id=f"0000:{bus:02x}:00.0",
        minor=minor,
        index=minor,
        architecture="Turing",
        cuda_compute_capability="7.5",
        driver_version="550.54.15",
    )


CARDS = (_card(0, 0x3B), _card(1, 0xAF))


def _uid() -> str:
    return str(uuid.uuid4())


def _result(**overrides: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": NODE,
        "device": "gpu-0",
        "shareID": _uid(),
        "consumedCapacity": {"cores": "30", "memory": "5Gi"},
    }
    result.update(overrides)
    return result


def _claim(uid: str, name: str, results: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }


class _Claims:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, obj: dict[str, Any]) -> ClaimRef:
        meta = obj["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = obj
        return ClaimRef(meta["namespace"], meta["uid"], meta["name"])

    def __call__(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self.objects[(namespace, name)]
        except KeyError:
            raise NotFoundError("x", status=404) from None


@dataclasses.dataclass
class _Node:
    paths: NodePaths
    claims: _Claims

    def started(self) -> ClaimPreparer:
        preparer = ClaimPreparer(
            NAMES,
            NODE,
            self.paths,
            get_claim=self.claims,
            cards=lambda: CARDS,
            default_backend=Backend.HAMI_CORE,
        )
        preparer.start()
        return preparer

    def spec_path(self, uid: str) -> Path:
        return self.paths.cdi_root / spec_file_name(NAMES, uid)

    def checkpoint(self) -> dict[str, ClaimEntry]:
        checkpoint = Checkpoint(self.paths.plugin_dir)
        checkpoint.load()
        return checkpoint.claims


@pytest.fixture
def node(tmp_path: Path) -> _Node:
    return _Node(
        paths=NodePaths(
            plugin_dir=tmp_path / "plugins" / DRIVER,
            cdi_root=tmp_path / "cdi",
            driver_root=Path("/"),
            hami_core_library=tmp_path / "lib" / "libvgpu.so",
            mps_pipe_directory=tmp_path / "mps",
        ),
        claims=_Claims(),
    )


def _without(key: str) -> dict[str, Any]:
    result = _result()
    del result[key]
    return result


MALFORMED_RESULTS = {
    "cores-not-a-string": _result(consumedCapacity={"cores": 30}),
    "memory-not-a-string": _result(consumedCapacity={"memory": 5 * 2**30}),
    "result-without-request": _without("request"),
    "result-without-device": _without("device"),
    "result-not-an-object": "gpu-0",
}


@pytest.mark.parametrize("bad", MALFORMED_RESULTS.values(), ids=MALFORMED_RESULTS.keys())
def test_malformed_claim_fails_alone(node: _Node, bad: object) -> None:
    """A malformed allocation result is that claim's error; the other claim still prepares."""
    preparer = node.started()
    bad_ref = node.claims.add(_claim(_uid(), "bad", [bad]))
    good_ref = node.claims.add(_claim(_uid(), "good", [_result()]))
    outcomes = preparer.prepare([bad_ref, good_ref])
    assert outcomes[bad_ref.uid].error
    assert not outcomes[bad_ref.uid].devices
    assert outcomes[good_ref.uid].error == ""
    assert outcomes[good_ref.uid].devices


def test_reprepare_restores_a_vanished_spec(node: _Node) -> None:
    """Preparing a prepared claim again rewrites its CDI spec if the file has vanished."""
    preparer = node.started()
    ref = node.claims.add(_claim(_uid(), "c1", [_result()]))
    first = preparer.prepare([ref])[ref.uid]
    assert first.error == ""
    written = node.spec_path(ref.uid).read_bytes()
    node.spec_path(ref.uid).unlink()  # e.g. a cleanup of /var/run/cdi while the plugin runs
    second = preparer.prepare([ref])[ref.uid]
    assert second == first
    assert node.spec_path(ref.uid).exists(), "the kubelet got CDI IDs whose spec file is gone"
    assert node.spec_path(ref.uid).read_bytes() == written


def _fail_checkpoint_write(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """Make the ``call``-th checkpoint entry commit (1-based) fail like a full disk."""
    calls = {"n": 0}

    class Flaky(StagedFile):
        def commit(self, *, sync_file: bool = True) -> None:
            calls["n"] += 1
            if calls["n"] == call:
                self.discard()
                raise OSError(28, "No space left on device")
            super().commit(sync_file=sync_file)

    monkeypatch.setattr(checkpoint_module, "StagedFile", Flaky)


def _fail_checkpoint_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next sync of the checkpoint directory fail like an I/O error."""
    real = checkpoint_module.sync_directory_of
    calls = {"n": 0}

    def flaky(path: Path) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(5, "Input/output error")
        real(path)

    monkeypatch.setattr(checkpoint_module, "sync_directory_of", flaky)


def test_failed_completed_save_is_not_reported_prepared(
    node: _Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a retry succeeds, the claim is PrepareCompleted on disk and survives a restart."""
    preparer = node.started()
    ref = node.claims.add(_claim(_uid(), "c1", [_result()]))
    _fail_checkpoint_write(monkeypatch, call=1)  # the claim's entry
    assert preparer.prepare([ref])[ref.uid].error  # the kubelet is told and retries
    retry = preparer.prepare([ref])[ref.uid]
    assert retry.error == ""
    assert node.checkpoint()[ref.uid].state is ClaimState.PREPARE_COMPLETED
    node.started()  # plugin restart
    assert node.spec_path(ref.uid).exists()


def test_failed_remove_save_does_not_resurrect_the_claim(
    node: _Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unprepare that finally succeeds leaves no checkpoint entry and no spec after restart."""
    preparer = node.started()
    ref = node.claims.add(_claim(_uid(), "c1", [_result()]))
    assert preparer.prepare([ref])[ref.uid].error == ""
    _fail_checkpoint_sync(monkeypatch)
    assert preparer.unprepare([ref])[ref.uid]  # the kubelet is told and retries
    assert preparer.unprepare([ref])[ref.uid] == ""
    monkeypatch.undo()
    assert ref.uid not in node.checkpoint()
    node.started()  # plugin restart
    assert not node.spec_path(ref.uid).exists()


def test_overlapping_plugin_pods_keep_each_others_claims(node: _Node) -> None:
    """A claim prepared by the old plugin Pod stays in the checkpoint when the new one writes."""
    old, new = node.started(), node.started()  # rolling update: both serve the node
    first = node.claims.add(_claim(_uid(), "c1", [_result()]))
    second = node.claims.add(_claim(_uid(), "c2", [_result(device="gpu-1")]))
    assert old.prepare([first])[first.uid].error == ""
    assert new.prepare([second])[second.uid].error == ""
    on_disk = node.checkpoint()
    assert set(on_disk) == {first.uid, second.uid}
    node.started()  # the next restart must keep both specs
    assert node.spec_path(first.uid).exists()
