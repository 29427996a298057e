"""Fuzz the GpuShareConfig decoder: any input is either a config or a ConfigError, never a crash."""

from __future__ import annotations

import json
from typing import Any

from fuzz.budget import FUZZ
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.api import DEFAULT_DRIVER_NAME, ConfigError, DriverNames, decode_config

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
FIELDS = ["apiVersion", "kind", "isolation", "priority", "placement", "backend"]
VALUES = {
    "apiVersion": [NAMES.config_api_version, "v1", ""],
    "kind": ["GpuShareConfig", "gpushareconfig"],
    "isolation": ["best-effort", "fixed-share", "burst-share", "exclusive", "full"],
    "priority": ["online", "offline", "urgent"],
    "placement": ["binpack", "spread", "random"],
    "backend": ["hami-core", "mps", "none", "vulkan"],
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)
near_valid = st.fixed_dictionaries(
    {}, optional={field: st.sampled_from(VALUES[field]) | json_values for field in FIELDS}
) | st.dictionaries(st.sampled_from([*FIELDS, "extra"]) | st.text(), json_values)


def _decode(raw: Any) -> Any:
    try:
        return decode_config(raw, NAMES)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("parameters"), message  # the field path comes first
        return None


@FUZZ
@given(near_valid)
def test_any_object_decodes_or_is_refused_naming_the_field(raw: dict[str, Any]) -> None:
    """Objects near the schema: a config that round-trips, or a ConfigError naming a field."""
    config = _decode(raw)
    if config is not None:
        again = decode_config(json.dumps(config.to_parameters(NAMES)), NAMES)
        assert again == config


@FUZZ
@given(st.binary(max_size=2048) | st.text(max_size=2048))
def test_any_bytes_or_text_decode_or_are_refused(raw: bytes | str) -> None:
    """Arbitrary bytes and text (broken UTF-8, JSON constants, deep nesting) never crash it."""
    _decode(raw)


@FUZZ
@given(json_values)
def test_any_json_value_decodes_or_is_refused(raw: Any) -> None:
    """Any JSON value at all, as an already parsed object."""
    _decode(raw)
