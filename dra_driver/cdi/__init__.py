"""Container Device Interface: per-claim spec names and container edits for the kubelet plugin."""

from dra_driver.cdi.backends import (
    CardLimit,
    CardShare,
    HostPaths,
    InvalidShareError,
    UnsupportedPolicyError,
    build_edits,
    card_limits,
)
from dra_driver.cdi.names import (
    UnsafeNameError,
    cdi_device_name,
    check_card_uuid,
    check_claim_uid,
    check_device_name,
    check_env_value,
    check_request_name,
    check_share_id,
    qualified_name,
    spec_file_name,
)
from dra_driver.cdi.spec import (
    CdiDevice,
    CdiSpec,
    ContainerEdits,
    DeviceNode,
    Mount,
    atomic_write_json,
)
from dra_driver.cdi.validate import required_version, validate_spec

__all__ = [
    "CardLimit",
    "CardShare",
    "CdiDevice",
    "CdiSpec",
    "ContainerEdits",
    "DeviceNode",
    "HostPaths",
    "InvalidShareError",
    "Mount",
    "UnsafeNameError",
    "UnsupportedPolicyError",
    "atomic_write_json",
    "build_edits",
    "card_limits",
    "cdi_device_name",
    "check_card_uuid",
    "check_claim_uid",
    "check_device_name",
    "check_env_value",
    "check_request_name",
    "check_share_id",
    "qualified_name",
    "required_version",
    "spec_file_name",
    "validate_spec",
]
