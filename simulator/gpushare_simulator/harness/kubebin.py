"""Where the real Kubernetes binaries come from, ready to run.

A directory holds them plain (an envtest download, your own build) or gzip-compressed
(``kube-apiserver.gz`` …), optionally with a ``SHA256SUMS`` of the unpacked files. Compressed
ones are unpacked once into a cache named by the archive's digest and checked against the sums,
so a second run starts at once and a changed archive is never served from a stale copy.

``etcd`` and ``kube-apiserver`` are required; ``kube-controller-manager``,
``kube-scheduler`` and ``klhollow`` (a real kubelet with a fake container runtime) are used
where present, and a test that needs one skips or fails naming it.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from gpushare_simulator.harness._controlplane_setup import ControlPlaneError

KUBE_BINARIES_ENV: Final = "GPUSHARE_KUBE_BINARIES"
"""Names a directory of binaries; tests use it instead of their default."""
CACHE_ENV: Final = "GPUSHARE_KUBE_CACHE"
"""Where compressed binaries are unpacked (default ``$XDG_CACHE_HOME/gpushare-dra``)."""

REQUIRED: Final = ("etcd", "kube-apiserver")
CONTROLLER_MANAGER: Final = "kube-controller-manager"
SCHEDULER: Final = "kube-scheduler"
KUBELET: Final = "klhollow"
KNOWN: Final = (*REQUIRED, CONTROLLER_MANAGER, SCHEDULER, KUBELET)
_SUMS: Final = "SHA256SUMS"
_CHUNK: Final = 1 << 20


@dataclasses.dataclass(frozen=True)
class KubeBinaries:
    """Runnable binaries, by name; ``source`` is the directory they were found in."""

    source: Path
    paths: Mapping[str, Path]

    def has(self, name: str) -> bool:
        """Whether ``name`` is available."""
        return name in self.paths

    def path(self, name: str) -> Path:
        """Return the executable ``name``; ControlPlaneError naming the directory when absent."""
        if name not in self.paths:
            raise ControlPlaneError(
                f"{self.source} has no {name} (nor {name}.gz); it holds: "
                f"{', '.join(sorted(self.paths)) or 'none of ' + ', '.join(KNOWN)}"
            )
        return self.paths[name]


def source(default: Path, environ: Mapping[str, str] | None = None) -> Path | None:
    """Return the directory of binaries to use: ``$GPUSHARE_KUBE_BINARIES``, else ``default``.

    ``None`` when the variable is unset and ``default`` (a checkout's ``../shared/k8s/bin``) is
    not there.
    """
    env = os.environ if environ is None else environ
    given = env.get(KUBE_BINARIES_ENV, "")
    if given:
        return Path(given).expanduser()
    return default if default.is_dir() else None


def default_cache(environ: Mapping[str, str] | None = None) -> Path:
    """Return the unpack cache: ``$GPUSHARE_KUBE_CACHE``, else under ``$XDG_CACHE_HOME``."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpushare-dra" / "kube-binaries"


def prepare(source: Path, cache: Path | None = None) -> KubeBinaries:
    """Find the binaries in ``source``, unpacking compressed ones into ``cache``.

    ControlPlaneError when ``source`` is not a directory, lacks a required binary, or an
    unpacked binary does not match ``SHA256SUMS``.
    """
    if not source.is_dir():
        raise ControlPlaneError(
            f"{source}: not a directory of Kubernetes binaries (it must hold "
            f"{' and '.join(REQUIRED)}, plain or .gz; see tests/README.md)"
        )
    sums = _read_sums(source / _SUMS)
    paths: dict[str, Path] = {}
    for name in KNOWN:
        plain, packed = source / name, source / f"{name}.gz"
        if plain.is_file():
            if not os.access(plain, os.X_OK):
                raise ControlPlaneError(f"{plain} is not executable (chmod +x)")
            paths[name] = plain
        elif packed.is_file():
            paths[name] = _unpacked(packed, name, cache or default_cache(), sums.get(name))
    missing = [name for name in REQUIRED if name not in paths]
    if missing:
        raise ControlPlaneError(
            f"{source}: missing {', '.join(missing)} (plain or .gz); it must hold "
            f"{' and '.join(REQUIRED)}, and may hold {', '.join(KNOWN[2:])}"
        )
    return KubeBinaries(source, paths)


def _read_sums(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text().splitlines():
        digest, _, name = line.strip().partition("  ")
        if digest and name:
            sums[name.lstrip("*")] = digest
    return sums


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _unpacked(packed: Path, name: str, cache: Path, expected: str | None) -> Path:
    """Return ``packed`` unpacked in the cache, unpacking (and checking) it the first time."""
    target = cache / _digest(packed)[:16] / name
    if target.is_file() and os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{name}.{os.getpid()}")
    try:
        with gzip.open(packed, "rb") as src, partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
        if expected is not None and _digest(partial) != expected:
            raise ControlPlaneError(
                f"{packed} unpacks to a file whose sha256 is not the one {_SUMS} gives for {name}"
            )
        partial.chmod(0o755)
        partial.replace(target)  # atomic: a concurrent run sees the old state or the whole file
    finally:
        partial.unlink(missing_ok=True)
    return target
