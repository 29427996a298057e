"""The properties docs/security.md promises, pinned against the chart and the plugin's files."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from deploy.chartkit import MATRIX, Rendered, containers, helm_binary, render
from kubeletplugin.test_state import DRIVER, FakeClaims, Node, claim, new_uid

from dra_driver.kubeletplugin.state import NodePaths

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


def test_a_planted_symlink_at_a_spec_path_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    """The spec is a 0644 regular file; the symlink's target is never written or removed."""
    node = Node(
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
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1"))
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
