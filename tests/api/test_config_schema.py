"""The generated JSON Schema: committed copy, shape, and agreement with the decoder."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from dra_driver.api import (
    DEFAULT_DRIVER_NAME,
    Backend,
    ConfigError,
    DriverNames,
    GpuShareConfig,
    Isolation,
    Placement,
    Priority,
    config_json_schema,
    decode_config,
    render_config_json_schema,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO_ROOT / "api" / "v1alpha1" / "gpushareconfig.schema.json"
GENERATOR = REPO_ROOT / "hack" / "gen-config-schema.py"
NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
CUSTOM = DriverNames.for_driver("gpu.example.com")
SCHEMA = config_json_schema(NAMES)
VALIDATOR = Draft202012Validator(SCHEMA)


def run_generator(*args: str) -> subprocess.CompletedProcess[str]:
    """Run hack/gen-config-schema.py with this interpreter."""
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args], capture_output=True, text=True, check=False
    )


def test_committed_schema_is_current():
    """The committed schema file is exactly what the generator writes today."""
    assert SCHEMA_FILE.read_text(encoding="utf-8") == render_config_json_schema(NAMES), (
        f"{SCHEMA_FILE.relative_to(REPO_ROOT)} is stale: "
        "run `.venv/bin/python hack/gen-config-schema.py` and commit the result"
    )


def test_generator_check_passes_on_the_committed_file():
    """`gen-config-schema.py --check` exits 0 while the committed file is current."""
    result = run_generator("--check")
    assert result.returncode == 0, result.stderr


def test_generator_check_fails_on_a_stale_file(tmp_path: Path):
    """`--check` exits 1 and says how to fix it when the file differs from the generated one."""
    stale = tmp_path / "schema.json"
    stale.write_text("{}\n", encoding="utf-8")
    result = run_generator("--check", "--output", str(stale))
    assert result.returncode == 1
    assert result.stderr == (
        f"{stale} is stale: run `.venv/bin/python hack/gen-config-schema.py` "
        "and commit the result\n"
    )


def test_generator_writes_the_rendered_schema(tmp_path: Path):
    """Without --check the generator writes the rendered schema, byte for byte."""
    output = tmp_path / "out" / "schema.json"
    result = run_generator("--output", str(output))
    assert result.returncode == 0, result.stderr
    assert output.read_text(encoding="utf-8") == render_config_json_schema(NAMES)


def test_rendering_is_deterministic_and_sorted():
    """The rendered file has sorted keys, two-space indent and a trailing newline."""
    text = render_config_json_schema(NAMES)
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert text == render_config_json_schema(NAMES)


def test_schema_is_valid_draft_2020_12():
    """The schema itself is a valid draft 2020-12 schema."""
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_schema_shape():
    """The schema is a closed object that requires apiVersion and kind with fixed values."""
    properties = SCHEMA["properties"]
    assert isinstance(properties, dict)
    assert SCHEMA["type"] == "object"
    assert SCHEMA["additionalProperties"] is False
    assert SCHEMA["required"] == ["apiVersion", "kind"]
    assert properties["apiVersion"]["const"] == "gpushare.dra.dev/v1alpha1"
    assert properties["kind"]["const"] == "GpuShareConfig"
    assert SCHEMA["$id"] == "https://gpushare.dra.dev/v1alpha1/GpuShareConfig.schema.json"
    assert SCHEMA["title"] == "GpuShareConfig (gpushare.dra.dev/v1alpha1)"


@pytest.mark.parametrize(
    ("name", "enum"),
    [
        ("isolation", Isolation),
        ("priority", Priority),
        ("placement", Placement),
        ("backend", Backend),
    ],
    ids=["isolation", "priority", "placement", "backend"],
)
def test_enum_fields_follow_the_enums(name: str, enum: type[Isolation]):
    """Each field lists its enum's values in declaration order, plus null for unset."""
    properties = SCHEMA["properties"]
    assert isinstance(properties, dict)
    assert properties[name]["enum"] == [*(member.value for member in enum), None]
    assert properties[name]["type"] == ["string", "null"]


def test_every_field_has_its_metadata_description():
    """Every property is described, the config fields by their dataclass field metadata."""
    properties = SCHEMA["properties"]
    assert isinstance(properties, dict)
    assert set(properties) == set(KNOWN_KEYS)
    for field in dataclasses.fields(GpuShareConfig):
        assert properties[field.name]["description"] == field.metadata["description"]
    assert all(prop["description"] for prop in properties.values())


def test_custom_driver_name_changes_the_constants():
    """The schema for another driver name fixes that name's apiVersion and $id."""
    schema = config_json_schema(CUSTOM)
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert properties["apiVersion"]["const"] == "gpu.example.com/v1alpha1"
    assert schema["$id"] == "https://gpu.example.com/v1alpha1/GpuShareConfig.schema.json"


KNOWN_KEYS = [
    "apiVersion",
    "kind",
    "isolation",
    "priority",
    "placement",
    "backend",
    "cores",
    "memory",
    "preemptible",
]
ENUM_VALUES = [
    member.value for enum in (Isolation, Priority, Placement, Backend) for member in enum
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**6), max_value=10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
# Values likely to matter: every enum value (often on the wrong field), near misses, the
# constants and arbitrary JSON.
field_values = (
    st.sampled_from([*ENUM_VALUES, "Online", "burst", "fixed_share", "", "x/v1", "GpuConfig"])
    | st.sampled_from(["30", "030", "100", "101", "-1", "1.5", "0", "5Gi", "512Mi", "0Mi", "5G"])
    | st.sampled_from([0, 30, 100, 101, -1, 30.0, 30.5, 1e300, True, False, "false"])
    | st.sampled_from([NAMES.config_api_version, NAMES.config_kind, None])
    | json_values
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, object]:
    """Draw a valid config document, then apply a few random edits to it."""
    config = draw(
        st.builds(
            GpuShareConfig,
            isolation=st.none() | st.sampled_from(Isolation),
            priority=st.none() | st.sampled_from(Priority),
            placement=st.none() | st.sampled_from(Placement),
            backend=st.none() | st.sampled_from(Backend),
            cores=st.none() | st.integers(min_value=0, max_value=100),
            memory=st.none() | st.integers(min_value=1, max_value=10**6).map(lambda m: m << 20),
            preemptible=st.none() | st.booleans(),
        )
    )
    document: dict[str, object] = dict(config.to_parameters(NAMES))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        key = draw(st.sampled_from(KNOWN_KEYS) | st.text(max_size=8))
        if draw(st.booleans()):
            document.pop(key, None)
        else:
            document[key] = draw(field_values)
    return document


@settings(max_examples=400, deadline=None)
@given(documents())
def test_schema_and_decoder_agree(document: dict[str, object]):
    """The JSON Schema and decode_config accept and refuse exactly the same documents."""
    try:
        decode_config(document, NAMES)
    except ConfigError:
        decoded = False
    else:
        decoded = True
    assert VALIDATOR.is_valid(document) == decoded
