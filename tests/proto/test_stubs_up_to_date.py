"""The committed stubs in dra_driver/_proto are exactly what hack/gen-protos.sh generates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "hack" / "gen-protos.sh"
COMMITTED = REPO_ROOT / "dra_driver" / "_proto"
HINT = "The committed stubs are stale: run hack/gen-protos.sh and commit dra_driver/_proto."
SCRIPT_TIMEOUT_S = 90


def _run_script(
    output_root: Path, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    """Run the generator into output_root with the given interpreter."""
    return subprocess.run(
        [str(SCRIPT), str(output_root)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": python},
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )


def _tree(root: Path) -> dict[str, bytes]:
    """Map every file under root (bytecode caches excluded) to its content."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Files produced by a fresh run of hack/gen-protos.sh into a temporary root."""
    out = tmp_path_factory.mktemp("regen")
    result = _run_script(out)
    if result.returncode != 0:
        pytest.fail(f"hack/gen-protos.sh failed ({result.returncode}):\n{result.stderr}")
    return _tree(out / "dra_driver" / "_proto")


class TestCommittedStubs:
    """The committed tree and a fresh generation agree file for file, byte for byte."""

    def test_generator_produces_all_five_apis(self, regenerated: dict[str, bytes]) -> None:
        """A fresh run yields the four stub files for each of the five kubelet APIs."""
        packages = [
            "pluginregistration/v1",
            "dra/v1",
            "dra/v1beta1",
            "dra_health/v1alpha1",
            "dra_health/v1",
        ]
        expected = {
            f"{pkg}/{name}"
            for pkg in packages
            for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")
        }
        assert expected <= regenerated.keys()

    def test_no_committed_file_is_missing(self, regenerated: dict[str, bytes]) -> None:
        """Every file the generator produces is committed."""
        missing = sorted(regenerated.keys() - _tree(COMMITTED).keys())
        assert not missing, f"{HINT}\nNot committed: {missing}"

    def test_no_committed_file_is_extra(self, regenerated: dict[str, bytes]) -> None:
        """No committed file under dra_driver/_proto is left over from an older generation."""
        extra = sorted(_tree(COMMITTED).keys() - regenerated.keys())
        assert not extra, f"{HINT}\nNot generated any more: {extra}"

    def test_committed_files_are_byte_identical(self, regenerated: dict[str, bytes]) -> None:
        """Each committed stub has exactly the bytes that the generator writes today."""
        committed = _tree(COMMITTED)
        differing = sorted(
            name
            for name, content in regenerated.items()
            if name in committed and committed[name] != content
        )
        assert not differing, f"{HINT}\nDiffering: {differing}"


class TestGeneratorScript:
    """Behaviour of hack/gen-protos.sh itself."""

    def test_rerun_replaces_only_the_proto_tree(self, tmp_path: Path) -> None:
        """A rerun wipes stale files in dra_driver/_proto but leaves siblings alone."""
        stale = tmp_path / "dra_driver" / "_proto" / "stale_pb2.py"
        stale.parent.mkdir(parents=True)
        stale.write_text("# left over\n")
        sibling = tmp_path / "dra_driver" / "keep.py"
        sibling.write_text("# not ours\n")

        result = _run_script(tmp_path)

        assert result.returncode == 0, result.stderr
        assert not stale.exists()
        assert sibling.read_text() == "# not ours\n"
        assert (tmp_path / "dra_driver" / "_proto" / "dra" / "v1" / "api_pb2.py").is_file()

    def test_wrong_generator_version_is_refused(self, tmp_path: Path) -> None:
        """An interpreter without the exact generator pins fails clearly and writes nothing."""
        fake_python = tmp_path / "fake-python"
        fake_python.write_text("#!/bin/sh\ncat >/dev/null\necho 0.0.1\n")
        fake_python.chmod(0o755)
        out = tmp_path / "out"
        out.mkdir()

        result = _run_script(out, python=str(fake_python))

        assert result.returncode != 0
        assert "grpcio-tools==1.85.1 is required (found: 0.0.1)" in result.stderr
        assert not (out / "dra_driver").exists()
