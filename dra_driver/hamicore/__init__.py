"""HAMi-core's shared region: its layout, decoding it, and the host monitor's decisions.

``libvgpu.so`` keeps one region per container in the file named by
``CUDA_DEVICE_MEMORY_SHARED_CACHE``: the limits, each process's memory and SM use per card,
and the fields through which a host monitor suspends low-priority work and lets a lone task
burst. Everything here is pure (bytes in, values out) except :mod:`.regionfile`, which opens
and maps region files safely.
"""

from dra_driver.hamicore.layout import KNOWN_VERSIONS, REGION_SIZE, RegionLayout
from dra_driver.hamicore.region import (
    CardUsage,
    ProcessSlot,
    Region,
    RegionError,
    decode_region,
    region_to_json,
)

__all__ = [
    "KNOWN_VERSIONS",
    "REGION_SIZE",
    "CardUsage",
    "ProcessSlot",
    "Region",
    "RegionError",
    "RegionLayout",
    "decode_region",
    "region_to_json",
]
