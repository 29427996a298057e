"""managedFields survive writers that do not know them, as on a real API server."""

from __future__ import annotations

from typing import Any

from harness.apiserver.builders import claim
from kubernetes import client

from dra_driver.k8s import raw

ENTRY = {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}


def stored(api: client.ResourceV1Api) -> dict[str, Any]:
    """Read claim c back."""
    return raw.call(api.read_namespaced_resource_claim, "c", "default")


def test_a_write_that_leaves_managed_fields_out_keeps_them(
    resource_api: client.ResourceV1Api,
) -> None:
    """Create keeps what is sent; an update without the field, or with [], keeps it; [{}] clears."""
    raw.call(resource_api.create_namespaced_resource_claim, "default", claim("c"))
    current = stored(resource_api)
    assert "managedFields" not in current["metadata"]
    current["metadata"]["managedFields"] = [ENTRY]
    raw.call(resource_api.replace_namespaced_resource_claim, "c", "default", current)
    current = stored(resource_api)
    assert current["metadata"]["managedFields"] == [ENTRY]
    for leaves_out in (None, []):
        if leaves_out is None:
            del current["metadata"]["managedFields"]
        else:
            current["metadata"]["managedFields"] = leaves_out
        current["metadata"]["labels"] = {"touched": "empty" if leaves_out == [] else "none"}
        raw.call(resource_api.replace_namespaced_resource_claim, "c", "default", current)
        current = stored(resource_api)
        assert current["metadata"]["managedFields"] == [ENTRY]
    current["metadata"]["managedFields"] = [{}]
    raw.call(resource_api.replace_namespaced_resource_claim, "c", "default", current)
    assert "managedFields" not in stored(resource_api)["metadata"]
