"""The properties docs/security.md promises, pinned against the chart and the plugin's files."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path

import pytest
from deploy.chartkit import MATRIX, Rendered, containers, helm_binary, render
from kubeletplugin.test_state import DRIVER, FakeClaims, Node, claim, new_uid

from dra_driver.cdi.backends import HAMI_LIBRARY_PATH
from dra_driver.kubeletplugin.entries import ClaimRef
from dra_driver.kubeletplugin.locking import file_lock
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.kubeletplugin.state import ClaimPreparer

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
WORKLOADS = {"kubelet-plugin": "kubelet plugin", "hami-core-installer": "HAMi-core installer"}
CASES = ("defaults", "mps-backend", "all-options")


@pytest.fixture(scope="module")
def renders() -> dict[str, Rendered]:
    return {case: render(helm_binary(), MATRIX[case]) for case in CASES}


def documented_host_paths() -> set[tuple[str, str, str, str]]:
    """Rows of the doc's host-path table: (path, workload, type, mode)."""
    section = DOC.read_text().split("## Host paths", 1)[1].split("\n## ", 1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            # "`<driverRoot>` when not `/`", "`/run/nvidia/mps` (backend `mps`)": the path.
            path = re.match(r"`([^`]+)`", cells[0])[1]  # type: ignore[index]
            rows.add((path, cells[1], cells[2], cells[3]))
    return rows


def rendered_host_paths(objects: Rendered) -> set[tuple[str, str, str, str]]:
    rows = set()
    for workload in objects.of_kind("DaemonSet") + objects.of_kind("Deployment"):
        spec = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        role = workload["metadata"]["name"].removeprefix("gpushare-")
        for container in containers(workload):
            for mount in container.get("volumeMounts") or []:
                host = volumes[mount["name"]].get("hostPath")
                if host is None:
                    continue
                path = host["path"].replace(DRIVER, "<driver>")
                path = "<driverRoot>" if path == "/run/nvidia/driver" else path
                mode = "read-only" if mount.get("readOnly") else "read-write"
                rows.add((path, WORKLOADS[role], host["type"], mode))
    return rows


def test_every_host_path_is_the_documented_one(renders: dict[str, Rendered]) -> None:
    """The chart mounts exactly the host paths of the doc's table, with its types and modes."""
    mounted = set().union(*(rendered_host_paths(r) for r in renders.values()))
    assert mounted == documented_host_paths()


def test_only_the_kubelet_plugin_is_privileged(renders: dict[str, Rendered]) -> None:
    """No other container of any values case is privileged or may escalate."""
    for case, objects in renders.items():
        for workload in objects.of_kind("DaemonSet") + objects.of_kind("Deployment"):
            for container in containers(workload):
                context = container.get("securityContext") or {}
                if workload["metadata"]["name"].endswith("kubelet-plugin"):
                    assert context.get("privileged") is True, case
                    continue
                assert not context.get("privileged"), (case, workload["metadata"]["name"])
                assert context.get("allowPrivilegeEscalation") is False, case
                assert "ALL" in (context.get("capabilities") or {}).get("drop", []), case


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(
        root=tmp_path,
        paths=NodePaths(
            plugin_dir=tmp_path / "plugins" / DRIVER,
            cdi_root=tmp_path / "cdi",
            driver_root=Path("/"),
            hami_core_library=tmp_path / "lib" / "libvgpu.so",
            mps_pipe_directory=tmp_path / "mps",
        ),
        claims=FakeClaims(),
    )


def started_with_a_claim(node: Node) -> tuple[ClaimPreparer, ClaimRef]:
    """Start the node's plugin state and add one allocated claim to its API."""
    return node.started(), node.claims.add(claim(new_uid(), "c1"))


def test_a_planted_symlink_at_a_spec_path_is_replaced_not_written_through(
    tmp_path: Path, node: Node
) -> None:
    """The spec is a 0644 regular file; the symlink's target is never written or removed."""
    preparer, ref = started_with_a_claim(node)
    victim = tmp_path / "etc-shadow"
    victim.write_text("root:secret\n")
    node.spec_path(ref.uid).symlink_to(victim)
    assert preparer.prepare([ref])[ref.uid].error == ""
    spec = node.spec_path(ref.uid)
    assert not spec.is_symlink()
    assert stat.S_IMODE(spec.stat().st_mode) == 0o644
    assert victim.read_text() == "root:secret\n"
    assert preparer.unprepare([ref])[ref.uid] == ""
    assert not spec.exists()
    assert victim.read_text() == "root:secret\n"


def test_a_planted_symlink_at_a_cache_directory_is_refused_not_opened_up(
    tmp_path: Path, node: Node
) -> None:
    """Prepare fails that claim, naming the path; the link's target keeps its 0700 mode."""
    preparer, ref = started_with_a_claim(node)
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    node.cache_dir(ref.uid).symlink_to(victim, target_is_directory=True)
    error = preparer.prepare([ref])[ref.uid].error
    assert str(node.cache_dir(ref.uid)) in error
    assert "symlink or not a directory" in error
    assert stat.S_IMODE(victim.stat().st_mode) == 0o700
    assert ref.uid not in preparer.prepared


def test_a_checkpoint_reached_through_a_symlink_is_set_aside_not_trusted(
    tmp_path: Path, node: Node
) -> None:
    """A link at a claim's entry, even to a valid entry, is moved aside; its target stays."""
    donor = Node(
        tmp_path / "donor",
        dataclasses.replace(
            node.paths,
            plugin_dir=tmp_path / "donor" / "plugin",
            cdi_root=tmp_path / "donor" / "cdi",
        ),
        FakeClaims(),
    )
    donor_preparer = donor.started()
    ref = donor.claims.add(claim(new_uid(), "c1"))
    assert donor_preparer.prepare([ref])[ref.uid].error == ""
    target = donor.paths.plugin_dir / "checkpoint" / f"{ref.uid}.json"
    before = target.read_bytes()
    link = node.paths.plugin_dir / "checkpoint" / f"{ref.uid}.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    preparer = node.started()
    assert preparer.prepared == {}
    assert not link.is_symlink()
    assert [p.is_symlink() for p in link.parent.glob(f"{ref.uid}.json.corrupt-*")] == [True]
    assert target.read_bytes() == before


def test_a_checkpoint_directory_that_is_a_symlink_is_refused(tmp_path: Path, node: Node) -> None:
    """A link planted where the checkpoint directory belongs is never written through."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    node.paths.plugin_dir.mkdir(parents=True)
    (node.paths.plugin_dir / "checkpoint").symlink_to(elsewhere)
    with pytest.raises(OSError, match="symlink"):
        node.started()
    assert list(elsewhere.iterdir()) == []


def test_a_fifo_at_the_checkpoint_path_is_set_aside_without_hanging_start(node: Node) -> None:
    """A FIFO where checkpoint.json belongs counts as corrupt: start moves it aside, no read."""
    checkpoint = node.paths.plugin_dir / "checkpoint.json"
    checkpoint.parent.mkdir(parents=True)
    os.mkfifo(checkpoint)
    preparer = node.started()
    assert preparer.prepared == {}
    assert not checkpoint.exists()
    aside = list(checkpoint.parent.glob("checkpoint.json.corrupt-*"))
    assert [stat.S_ISFIFO(p.lstat().st_mode) for p in aside] == [True]


def test_the_node_lock_is_owner_only_and_never_opened_through_a_symlink(
    tmp_path: Path, node: Node
) -> None:
    """serialize.lock is created 0600; a link planted there is refused and its target not made."""
    node.started()
    lock = node.paths.plugin_dir / "serialize.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    lock.unlink()
    victim = tmp_path / "created-by-root"
    lock.symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"), file_lock(lock):
        pass
    assert not victim.exists()


def test_a_planted_symlink_at_the_preload_file_is_replaced_not_trusted(
    tmp_path: Path, node: Node
) -> None:
    """Start leaves ld.so.preload a 0644 regular file naming HAMi-core; the link's target stays."""
    preload = node.paths.hami_dir / "ld.so.preload"
    preload.parent.mkdir(parents=True)
    victim = tmp_path / "attacker-library-list"
    victim.write_text("/tmp/evil.so\n")
    preload.symlink_to(victim)
    node.started()
    assert not preload.is_symlink()
    assert preload.read_text() == HAMI_LIBRARY_PATH + "\n"
    assert stat.S_IMODE(preload.stat().st_mode) == 0o644
    assert victim.read_text() == "/tmp/evil.so\n"
