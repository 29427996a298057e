"""Where the kubelet plugin keeps its node state, and the host paths it hands to containers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.cdi import HostPaths
from dra_driver.nvml.driverfiles import DriverFiles


@dataclasses.dataclass(frozen=True)
class NodePaths:
    """Host paths the plugin owns or hands to containers."""

    plugin_dir: Path
    cdi_root: Path
    driver_root: Path
    hami_core_library: Path
    mps_pipe_directory: Path
    mps_shm_directory: Path | None = None
    driver_files: DriverFiles = dataclasses.field(default_factory=DriverFiles)
    ldcache_hook: str | None = None

    @property
    def hami_dir(self) -> Path:
        """Per-node HAMi-core state: the preload file, the lock dir, per-claim caches."""
        return self.plugin_dir / "hami"

    @property
    def hami_claims_dir(self) -> Path:
        """Where each hami-core claim's region files are: one directory per claim UID."""
        return self.hami_dir / "claims"

    def host_paths(self, claim_uid: str) -> HostPaths:
        """Return the host paths a claim's container edits point at."""
        return HostPaths(
            driver_root=self.driver_root,
            hami_library=self.hami_core_library,
            hami_preload_file=self.hami_dir / "ld.so.preload",
            hami_cache_dir=self.hami_claims_dir / claim_uid,
            hami_lock_dir=self.hami_dir / "lock",
            mps_pipe_dir=self.mps_pipe_directory,
            mps_shm_dir=self.mps_shm_directory,
            driver_files=tuple((f.host_path, f.container_path) for f in self.driver_files.files),
            ldcache_hook=self.ldcache_hook,
            ldcache_dirs=self.driver_files.library_dirs,
        )
