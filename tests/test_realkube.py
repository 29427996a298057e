"""Where the real-plane tests find Kubernetes binaries, and when they may not skip."""

from __future__ import annotations

from pathlib import Path

import pytest
import realkube
from gpushare_simulator.harness import kubebin


def test_without_binaries_a_test_skips_but_fails_under_ci_with_the_shared_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No binaries: a skip naming the variable; under CI with ../shared/k8s there, a failure."""
    monkeypatch.delenv(kubebin.KUBE_BINARIES_ENV, raising=False)
    monkeypatch.setattr(realkube, "SHARED", tmp_path / "k8s")  # exists only when made
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception, match=kubebin.KUBE_BINARIES_ENV):
        realkube.binaries()
    (tmp_path / "k8s").mkdir()
    assert realkube.required()
    with pytest.raises(pytest.fail.Exception, match="no Kubernetes binaries"):
        realkube.binaries()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        realkube.binaries()


def test_a_named_directory_wins_and_a_missing_binary_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GPUSHARE_KUBE_BINARIES is used first; a test needing an absent binary says which."""
    for name in ("etcd", "kube-apiserver"):  # envtest's pair
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv(kubebin.KUBE_BINARIES_ENV, str(tmp_path))
    monkeypatch.setenv("CI", "false")
    assert realkube.binaries().source == tmp_path
    with pytest.raises(pytest.skip.Exception, match="has no klhollow"):
        realkube.binaries("klhollow")
