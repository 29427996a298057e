"""The JSON Schema of ``GpuShareConfig``, generated from the dataclass and its enums.

Editors and ``kubectl``-side tooling validate with the schema; the driver validates with
:func:`~dra_driver.api.decode.decode_config`. Both are derived from the same fields so they
cannot drift apart, and a test checks that they accept and refuse the same documents.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

from dra_driver.api.gpushareconfig import CONFIG_FIELDS

if TYPE_CHECKING:
    from dra_driver.api.driver import DriverNames

_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
_DESCRIPTION: Final = (
    "Sharing policy of a GPU share, given as opaque device config in a ResourceClaim or a "
    "DeviceClass. Unset fields come from earlier config entries (DeviceClass entries first, "
    "then the claim's), then from the defaults. Unknown fields are errors."
)


def config_json_schema(names: DriverNames) -> dict[str, object]:
    """Return the draft 2020-12 JSON Schema of ``GpuShareConfig`` for this driver name."""
    properties: dict[str, object] = {
        "apiVersion": {
            "type": "string",
            "const": names.config_api_version,
            "description": "The config's API group (the driver name) and version.",
        },
        "kind": {
            "type": "string",
            "const": names.config_kind,
            "description": "The config's type.",
        },
    }
    for field in CONFIG_FIELDS:
        # null is allowed because it means "unset" in the Kubernetes API, as in the decoder.
        properties[field.json_name] = {**field.codec.schema(), "description": field.description}
    return {
        "$schema": _DIALECT,
        "$id": f"https://{names.config_api_version}/{names.config_kind}.schema.json",
        "title": f"{names.config_kind} ({names.config_api_version})",
        "description": _DESCRIPTION,
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind"],
        "properties": properties,
    }


def render_config_json_schema(names: DriverNames) -> str:
    """Return the schema as the committed file holds it: sorted keys, indented, newline at end."""
    return (
        json.dumps(config_json_schema(names), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )
