"""Where the tests find real Kubernetes binaries, and whether they may skip without them.

``GPUSHARE_KUBE_BINARIES`` names a directory (plain binaries, e.g. envtest's, or ``.gz`` ones);
without it the tests use the project's ``../shared/k8s/bin`` beside the checkout, when there.
Tests that need them carry the ``realk8s`` marker; they skip naming what is missing, except
under CI (``CI=true``) where ``../shared/k8s`` exists: there a skip fails the run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import pytest
from gpushare_simulator.harness import kubebin
from gpushare_simulator.harness.controlplane import ControlPlaneError

ROOT: Final = Path(__file__).resolve().parent.parent
SHARED: Final = ROOT.parent / "shared" / "k8s"
MARKER: Final = "realk8s"


def required() -> bool:
    """Whether real-plane tests must run rather than skip (CI, with ../shared/k8s there)."""
    return os.environ.get("CI") == "true" and SHARED.is_dir()


def source() -> Path | None:
    """Return the directory of binaries to use: the variable's, else ../shared/k8s/bin."""
    return kubebin.source(SHARED / "bin")


def binaries(*needed: str) -> kubebin.KubeBinaries:
    """Return the prepared binaries holding ``needed``; skip (or fail in CI) when impossible."""
    directory = source()
    if directory is None:
        why = (
            f"no Kubernetes binaries: set {kubebin.KUBE_BINARIES_ENV} to a directory holding "
            f"etcd and kube-apiserver (and {', '.join(kubebin.KNOWN[2:])}), or check out "
            f"../shared/k8s beside the repository (see tests/README.md)"
        )
        pytest.fail(why) if required() else pytest.skip(why)
    try:
        found = kubebin.prepare(directory)
    except ControlPlaneError as exc:  # asked for, and unusable: an error, never a skip
        pytest.fail(str(exc))
    missing = [name for name in needed if not found.has(name)]
    if missing:
        why = f"{directory} has no {', '.join(missing)}, which this test needs"
        pytest.fail(why) if required() else pytest.skip(why)
    return found


def opt_in() -> kubebin.KubeBinaries | None:
    """Binaries only where GPUSHARE_KUBE_BINARIES is set: for suites that default to the fake."""
    given = os.environ.get(kubebin.KUBE_BINARIES_ENV, "")
    return kubebin.prepare(Path(given).expanduser()) if given else None
