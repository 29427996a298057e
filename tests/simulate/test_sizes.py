"""Rewriting claims for a cluster without consumable capacity: capacity moves into the config."""

from __future__ import annotations

from typing import Any

from gpushare_simulator.simulate.sizes import sized_by_config
from simulate.kit import NAMES

Object = dict[str, Any]


def template(*requests: Object, config: list[Object] | None = None) -> Object:
    """Return a ResourceClaimTemplate with these requests and config entries."""
    devices: Object = {"requests": list(requests)}
    if config is not None:
        devices["config"] = config
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": devices}},
    }


def share(name: str, **capacity: str) -> Object:
    """Return a request entry asking for capacity."""
    exactly = {"deviceClassName": NAMES.default_device_class}
    return {"name": name, "exactly": {**exactly, "capacity": {"requests": capacity}}}


def test_capacity_becomes_a_config_entry_for_its_request() -> None:
    """cores and memory leave the request and join a GpuShareConfig entry naming the request."""
    isolation = {"opaque": {"driver": NAMES.driver, "parameters": {"isolation": "fixed-share"}}}
    body, moved = sized_by_config(
        template(share("gpu", cores="30", memory="5Gi"), config=[isolation]), NAMES
    )
    devices = body["spec"]["spec"]["devices"]
    assert "capacity" not in devices["requests"][0]["exactly"]
    first, added = devices["config"]
    assert first == isolation
    assert added["requests"] == ["gpu"]
    assert added["opaque"]["parameters"] == {
        "apiVersion": NAMES.config_api_version,
        "kind": NAMES.config_kind,
        "cores": "30",
        "memory": "5Gi",
    }
    assert moved == {
        "spec.spec.devices.requests[0].exactly.capacity.requests[cores]": (
            "spec.spec.devices.config[1].opaque.parameters.cores"
        ),
        "spec.spec.devices.requests[0].exactly.capacity.requests[memory]": (
            "spec.spec.devices.config[1].opaque.parameters.memory"
        ),
    }


def test_a_first_available_alternative_is_named_by_its_result_name() -> None:
    """A firstAvailable sub-request's sizes apply to gpu/small, not to every alternative."""
    alternative = {"name": "small", "deviceClassName": NAMES.default_device_class}
    alternative["capacity"] = {"requests": {"cores": "10"}}
    body, _ = sized_by_config(template({"name": "gpu", "firstAvailable": [alternative]}), NAMES)
    (entry,) = body["spec"]["spec"]["devices"]["config"]
    assert entry["requests"] == ["gpu/small"]


def test_amounts_the_config_cannot_hold_stay_for_the_webhook_to_refuse() -> None:
    """12.5 cores or 1536Ki stay capacity requests, and nothing is added or moved."""
    for capacity in ({"cores": "12.5"}, {"memory": "1536Ki"}, {"cores": "30", "other": "1"}):
        original = template(share("gpu", **capacity))
        body, moved = sized_by_config(original, NAMES)
        assert (body, moved) == (original, {})


def test_other_documents_are_returned_unchanged() -> None:
    """A Deployment is copied as it is: only claims and templates carry capacity requests."""
    deployment = {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}}
    body, moved = sized_by_config(deployment, NAMES)
    assert (body, moved) == (deployment, {})
    assert body is not deployment
