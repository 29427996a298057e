"""The opaque config API: ``GpuShareConfig`` and the names derived from the driver name.

This package is a leaf: it uses only the standard library, so the webhook, the controller, the
kubelet plugin and tools can all import it without pulling in each other.
"""

from dra_driver.api.decode import MAX_PARAMETERS_BYTES, decode_config
from dra_driver.api.driver import (
    DEFAULT_DRIVER_NAME,
    QUOTA_KIND,
    DriverNames,
    InvalidDriverNameError,
)
from dra_driver.api.errors import ConfigError, Reason
from dra_driver.api.gpushareconfig import (
    DEFAULT_ISOLATION,
    DEFAULT_PRIORITY,
    Backend,
    EffectiveConfig,
    GpuShareConfig,
    Isolation,
    Placement,
    Priority,
    merge_configs,
)
from dra_driver.api.schema import config_json_schema, render_config_json_schema

__all__ = [
    "DEFAULT_DRIVER_NAME",
    "DEFAULT_ISOLATION",
    "DEFAULT_PRIORITY",
    "MAX_PARAMETERS_BYTES",
    "QUOTA_KIND",
    "Backend",
    "ConfigError",
    "DriverNames",
    "EffectiveConfig",
    "GpuShareConfig",
    "InvalidDriverNameError",
    "Isolation",
    "Placement",
    "Priority",
    "Reason",
    "config_json_schema",
    "decode_config",
    "merge_configs",
    "render_config_json_schema",
]
