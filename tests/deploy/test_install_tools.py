"""hack/install-tools.sh pins helm and kubectl by checksum and does nothing when they are there."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy.chartkit import INSTALL_TOOLS, ROOT

# What the script needs on the already-installed path; npm is deliberately not among them.
OFFLINE_TOOLS = ("dirname", "sha256sum", "cut")


def script_constants() -> dict[str, str]:
    text = INSTALL_TOOLS.read_text()
    return dict(re.findall(r'^readonly (\w+)="([^"$]+)"$', text, re.MULTILINE))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_script_pins_are_well_formed_and_match_its_header() -> None:
    """The npm integrity is a sha512, both sha256s are 64 hex digits, the header names the pin."""
    pins = script_constants()
    algorithm, _, digest = pins["NPM_INTEGRITY"].partition("-")
    assert algorithm == "sha512"
    assert len(base64.b64decode(digest, validate=True)) == 64
    for name in ("HELM_SHA256", "KUBECTL_SHA256"):
        assert re.fullmatch(r"[0-9a-f]{64}", pins[name]), name
    header = INSTALL_TOOLS.read_text().split("set -euo pipefail", 1)[0]
    assert f"{pins['NPM_PACKAGE']}@{pins['NPM_VERSION']}" in header


def test_installed_binaries_have_the_pinned_checksums(helm: Path) -> None:
    """The helm the tests use, and the kubectl beside it, are byte for byte the pinned ones."""
    pins = script_constants()
    if os.environ.get("HELM"):
        pytest.skip("$HELM points at a helm of your choice")
    assert sha256(helm) == pins["HELM_SHA256"]
    assert sha256(helm.parent / "kubectl") == pins["KUBECTL_SHA256"]


def offline_path(tmp_path: Path) -> str:
    """Return a PATH with only the commands the skip path needs: no npm, no network."""
    bin_dir = tmp_path / "path"
    bin_dir.mkdir()
    for tool in OFFLINE_TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def run_script(tools_dir: Path, path: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, str(INSTALL_TOOLS)],
        env={"PATH": path, "TOOLS_DIR": str(tools_dir), "HOME": str(tools_dir)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_second_run_is_a_no_op_without_npm(helm: Path, tmp_path: Path) -> None:
    """With both binaries in place and right, the script exits 0 and downloads nothing."""
    if os.environ.get("HELM"):
        pytest.skip("$HELM points at a helm of your choice")
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    for name in ("helm", "kubectl"):
        shutil.copy2(helm.parent / name, tools / "bin" / name)
    before = {p.name: p.stat().st_mtime_ns for p in (tools / "bin").iterdir()}
    done = run_script(tools, offline_path(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "already in" in done.stdout
    assert {p.name: p.stat().st_mtime_ns for p in (tools / "bin").iterdir()} == before


def test_wrong_checksum_triggers_a_reinstall(tmp_path: Path) -> None:
    """A tampered binary is not accepted: the script goes to npm (absent here: a clear error)."""
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    for name in ("helm", "kubectl"):
        target = tools / "bin" / name
        target.write_text("#!/bin/sh\necho tampered\n")
        target.chmod(0o755)
    done = run_script(tools, offline_path(tmp_path))
    assert done.returncode == 1
    assert "install-tools: error: 'npm' is not installed" in done.stderr


def test_tools_are_git_ignored_and_installed_by_the_test_gate() -> None:
    """.tools/ never gets committed, and hack/test.sh installs the tools before pytest runs."""
    assert ".tools/" in (ROOT / ".gitignore").read_text().splitlines()
    gate = (ROOT / "hack" / "test.sh").read_text()
    assert gate.index("./hack/install-tools.sh") < gate.index(".venv/bin/pytest")
    assert os.access(INSTALL_TOOLS, os.X_OK)
