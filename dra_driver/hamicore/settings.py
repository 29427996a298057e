"""Settings of ``gpushare-dra region`` (decode a HAMi-core region file)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.settings import flag, output_flag


@dataclasses.dataclass(frozen=True)
class RegionSettings:
    """Region decoding."""

    file: Path | None = flag(
        None,
        "the region file (CUDA_DEVICE_MEMORY_SHARED_CACHE), e.g. "
        "/var/lib/kubelet/plugins/<driver>/hami/claims/<claim UID>/<request>.cache",
        positional=True,
    )
    output: str = output_flag()
