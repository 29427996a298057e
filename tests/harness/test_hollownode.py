"""The real kubelet's launcher: its container records, and what klhollow leaves in /tmp."""

from __future__ import annotations

import secrets
import shutil
import socket
import threading
from pathlib import Path

from gpushare_simulator.harness.hollownode import HollowNode


def _node(work: Path) -> HollowNode:
    """Return a HollowNode never started: its stop only cleans up."""
    return HollowNode(
        Path("/nonexistent/klhollow"), "n1", work / "n1", work / "root", work / "kc", port=1
    )


def test_stopping_a_kubelet_removes_the_scratch_paths_its_log_names(tmp_path: Path) -> None:
    """The /tmp directory and socket each start logged go; a path merely mentioned stays."""
    number = secrets.randbelow(10**9)
    scratch = Path(f"/tmp/hollow-kubelet.{number}")
    (scratch / "static-pods1").mkdir(parents=True)
    sock_path = Path(f"/tmp/kubelet_remote_{number}.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock_path))
    listener.close()
    bystander = tmp_path / "hollow-kubelet.1"
    bystander.mkdir()
    node = _node(tmp_path)
    node.kubelet_dir.mkdir(parents=True)
    node.log_path.write_text(
        f"I1129 hollow_kubelet.go:150] Using {scratch} as root dir for hollow-kubelet\n"
        f'I1129 main.go:190] "klhollow: fake CRI runtime" endpoint="unix://{sock_path}" '
        f'rootDir="{node.kubelet_dir}"\n'
        f"I1129 something] Using {bystander} as root dir\n"
    )
    try:
        assert node.scratch() == [scratch, sock_path]
        node.stop()
        assert not scratch.exists()
        assert not sock_path.exists()
        assert bystander.is_dir()
        node.stop()  # repeatable: nothing left to remove
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        sock_path.unlink(missing_ok=True)


def test_a_kubelet_that_never_logged_has_no_scratch(tmp_path: Path) -> None:
    """No log yet (never started): nothing to remove, and stop does not fail."""
    node = _node(tmp_path)
    assert node.scratch() == []
    node.stop()


def test_a_record_read_while_the_kubelet_writes_it_is_read_once_written(tmp_path: Path) -> None:
    """klhollow truncates, then writes: an empty record is read again, not taken for broken."""
    node = _node(tmp_path)
    records = node.kubelet_dir / "containers"
    records.mkdir(parents=True)
    record = records / "ns_p_c.json"
    record.write_text("")
    text = (
        '{"namespace":"ns","pod":"p","podUID":"u1","container":"c","attempt":0,'
        '"cdiDevices":["k8s.gpushare.dra.dev/claim=x"]}'
    )
    writer = threading.Timer(0.05, record.write_text, args=(text,))
    writer.start()
    try:
        (found,) = node.records()
    finally:
        writer.join()
    assert (found.namespace, found.pod, found.name) == ("ns", "p", "c")
    assert found.cdi_devices == ("k8s.gpushare.dra.dev/claim=x",)
