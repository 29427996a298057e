"""Fuzz the CDI spec and env builder: hostile allocations are refused, the rest are safe specs."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from fuzz.budget import FUZZ
from hypothesis import example, given
from hypothesis import strategies as st
from kubeletplugin.test_state import CARDS, NODE

from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, DriverNames
from dra_driver.cdi import HostPaths, UnsafeNameError, validate_spec
from dra_driver.kubeletplugin.claims import ClaimError, prepare_claim

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
HOST = HostPaths(
    driver_root=Path("/"),
    hami_library=Path("/usr/local/vgpu/libvgpu.so"),
    hami_preload_file=Path("/var/lib/kubelet/plugins/x/hami/ld.so.preload"),
    hami_cache_dir=Path("/var/lib/kubelet/plugins/x/hami/claims/c"),
    hami_lock_dir=Path("/var/lib/kubelet/plugins/x/hami/lock"),
    mps_pipe_dir=Path("/tmp/nvidia-mps"),
)
ALLOWED_HOST_ROOTS = ("/usr/local/vgpu/", "/var/lib/kubelet/plugins/x/hami/", "/tmp/nvidia-mps")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
CDI_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")

hostile = st.text(max_size=40) | st.sampled_from(["../x", "a/b", "gpu-0\x00", "", "\u202egpu"])
devices = st.sampled_from(["gpu-0", "gpu-1"]) | hostile
quantities = st.sampled_from(["0", "1", "30", "100", "101", "-1", "5Gi", "15Gi", "16Gi", "1Mi"])
results = st.fixed_dictionaries(
    {
        "request": st.sampled_from(["gpu", "gpu/small", "GPU", "g pu"]) | hostile,
        "driver": st.just(NAMES.driver),
        "pool": st.sampled_from([NODE, "node-z"]),
        "device": devices,
        "consumedCapacity": st.fixed_dictionaries({"cores": quantities, "memory": quantities}),
    },
    optional={"shareID": st.uuids().map(str) | hostile},
)
ISOLATIONS = ["best-effort", "fixed-share", "burst-share", "exclusive"]
parameters = st.fixed_dictionaries(
    {"apiVersion": st.just(NAMES.config_api_version), "kind": st.just("GpuShareConfig")},
    optional={
        "isolation": st.sampled_from(ISOLATIONS) | hostile,
        "priority": st.sampled_from(["online", "offline"]) | hostile,
        "backend": st.sampled_from(["hami-core", "mps", "none"]) | hostile,
    },
)
configs = st.lists(
    st.fixed_dictionaries(
        {
            "source": st.sampled_from(["FromClass", "FromClaim"]),
            "opaque": st.fixed_dictionaries(
                {"driver": st.just(NAMES.driver), "parameters": parameters}
            ),
        }
    ),
    max_size=2,
)


def _claim(uid: str, found: list[dict[str, Any]], config: list[dict[str, Any]]) -> dict[str, Any]:
    devices: dict[str, Any] = {"results": found}
    if config:
        devices["config"] = config
    return {
        "metadata": {"name": "c", "namespace": "default", "uid": uid},
        "status": {"allocation": {"devices": devices}},
    }


def _check_safe(spec: dict[str, Any]) -> None:
    assert validate_spec(spec) == []
    edits = [spec.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in spec["devices"]]
    for edit in edits:
        for entry in edit.get("env") or []:
            name, _, value = entry.partition("=")
            assert ENV_NAME.fullmatch(name), entry
            assert "\x00" not in value, entry
            assert "\n" not in value, entry
        for mount in edit.get("mounts") or []:
            assert mount["hostPath"].startswith(ALLOWED_HOST_ROOTS), mount
            assert ".." not in Path(mount["hostPath"]).parts, mount
        for node in edit.get("deviceNodes") or []:
            assert re.fullmatch(r"/dev/nvidia(\d+|ctl|-uvm|-uvm-tools)", node["path"]), node
    for device in spec["devices"]:
        assert CDI_NAME.fullmatch(device["name"]), device


VALID = {
    "request": "gpu", "driver": NAMES.driver, "pool": NODE, "device": "gpu-1",
    "shareID": "11111111-2222-4333-8444-555555555555",
    "consumedCapacity": {"cores": "30", "memory": "5Gi"},
}  # fmt: skip


@FUZZ
@example(
    uid="0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0", found=[VALID], config=[], backend=Backend.HAMI_CORE
)
@example(uid="0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0", found=[VALID], config=[], backend=Backend.MPS)
@given(
    uid=st.uuids().map(str) | hostile,
    found=st.lists(results, min_size=1, max_size=3),
    config=configs,
    backend=st.sampled_from(list(Backend)),
)
def test_any_allocation_is_refused_or_builds_a_safe_spec(
    uid: str, found: list[dict[str, Any]], config: list[dict[str, Any]], backend: Backend
) -> None:
    """Hostile names and values are refused; what builds is a valid spec with safe env and paths."""
    try:
        prepared = prepare_claim(
            NAMES, NODE, _claim(uid, found, config), cards=CARDS, default_backend=backend, host=HOST
        )
    except (ClaimError, UnsafeNameError):
        return
    assert uuid.UUID(uid)  # a claim UID that is not a UUID never builds a spec
    _check_safe(prepared.spec.to_dict())


def test_a_valid_allocation_builds_and_passes_the_safety_checks() -> None:
    """The fuzz target's success path is reachable: a plain share builds a spec that passes."""
    uid = "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0"
    # MPS cannot lend idle compute, so its share is fixed rather than the default burst.
    fixed = [{"source": "FromClaim", "opaque": {"driver": NAMES.driver, "parameters": {
        "apiVersion": NAMES.config_api_version, "kind": "GpuShareConfig",
        "isolation": "fixed-share",
    }}}]  # fmt: skip
    for backend in Backend:
        prepared = prepare_claim(
            NAMES,
            NODE,
            _claim(uid, [VALID], fixed),
            cards=CARDS,
            default_backend=backend,
            host=HOST,
        )
        _check_safe(prepared.spec.to_dict())
