"""Strict decoding of GpuShareConfig: exact refusals, accepted inputs and the round trip."""

from __future__ import annotations

import contextlib
import json
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.api import (
    DEFAULT_DRIVER_NAME,
    MAX_PARAMETERS_BYTES,
    Backend,
    ConfigError,
    DriverNames,
    GpuShareConfig,
    Isolation,
    Placement,
    Priority,
    Reason,
    decode_config,
)

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
CUSTOM = DriverNames.for_driver("gpu.example.com")
API_VERSION = "gpushare.dra.dev/v1alpha1"
HEAD = {"apiVersion": API_VERSION, "kind": "GpuShareConfig"}

FIELDS = (
    '"apiVersion", "backend", "cores", "isolation", "kind", "memory", "placement", '
    '"preemptible", "priority"'
)
ISOLATIONS = '"best-effort", "burst-share", "exclusive", "fixed-share"'
UNKNOWN = f"Unknown field: allowed fields: {FIELDS}"
MUST_API = f'must be "{API_VERSION}"'
TOO_DEEP = "parameters: Invalid JSON: nested deeper than 32 levels"

configs = st.builds(
    GpuShareConfig,
    isolation=st.none() | st.sampled_from(Isolation),
    priority=st.none() | st.sampled_from(Priority),
    placement=st.none() | st.sampled_from(Placement),
    backend=st.none() | st.sampled_from(Backend),
    cores=st.none() | st.integers(min_value=0, max_value=100),
    memory=st.none() | st.integers(min_value=1, max_value=4 * 1024**2).map(lambda m: m * 1024**2),
    preemptible=st.none() | st.booleans(),
)


def doc(**members: object) -> bytes:
    """Return a config document: the correct apiVersion and kind, then ``members``."""
    return json.dumps({**HEAD, **members}).encode()


def nested(depth: int) -> object:
    """Return an array nested ``depth`` levels deep, built without recursion."""
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def padded(size: int) -> bytes:
    """Return a valid, empty config padded with spaces to exactly ``size`` bytes."""
    body = doc()
    return body[:-1] + b" " * (size - len(body)) + b"}"


# (id, raw input, expected .field, expected str()); each row is one way to get a config wrong.
MALFORMED: list[tuple[str, bytes, str, str]] = [
    ("unknown-field", doc(colour="red"), "parameters.colour", f"parameters.colour: {UNKNOWN}"),
    (
        "misspelled-field",
        doc(isolaton="fixed-share"),
        "parameters.isolaton",
        f"parameters.isolaton: {UNKNOWN}",
    ),
    (
        "field-wrong-case",
        doc(Isolation="fixed-share"),
        "parameters.Isolation",
        f"parameters.Isolation: {UNKNOWN}",
    ),
    (
        "unknown-field-odd-key",
        doc(**{"a.b\n": 1}),
        'parameters["a.b\\n"]',
        f'parameters["a.b\\n"]: {UNKNOWN}',
    ),
    (
        "unknown-field-long-key",
        doc(**{"k" * 100: 1}),
        f'parameters["{"k" * 64}"...]',
        f'parameters["{"k" * 64}"...]: {UNKNOWN}',
    ),
    (
        "isolation-bool",
        doc(isolation=True),
        "parameters.isolation",
        "parameters.isolation: Invalid type: expected a string, got boolean",
    ),
    (
        "isolation-number",
        doc(isolation=1),
        "parameters.isolation",
        "parameters.isolation: Invalid type: expected a string, got number",
    ),
    (
        "priority-number",
        doc(priority=0.5),
        "parameters.priority",
        "parameters.priority: Invalid type: expected a string, got number",
    ),
    (
        "priority-list",
        doc(priority=["online"]),
        "parameters.priority",
        "parameters.priority: Invalid type: expected a string, got array",
    ),
    (
        "placement-object",
        doc(placement={"mode": "binpack"}),
        "parameters.placement",
        "parameters.placement: Invalid type: expected a string, got object",
    ),
    (
        "backend-false",
        doc(backend=False),
        "parameters.backend",
        "parameters.backend: Invalid type: expected a string, got boolean",
    ),
    (
        "priority-huge-integer",
        doc()[:-1] + b',"priority":' + b"9" * 5000 + b"}",
        "parameters.priority",
        "parameters.priority: Invalid type: expected a string, got number",
    ),
    (
        "isolation-unknown",
        doc(isolation="fast"),
        "parameters.isolation",
        f'parameters.isolation: Unsupported value: "fast": supported values: {ISOLATIONS}',
    ),
    (
        "isolation-wrong-case",
        doc(isolation="Fixed-Share"),
        "parameters.isolation",
        f'parameters.isolation: Unsupported value: "Fixed-Share": supported values: {ISOLATIONS}',
    ),
    (
        "isolation-burst",
        doc(isolation="burst"),
        "parameters.isolation",
        f'parameters.isolation: Unsupported value: "burst": supported values: {ISOLATIONS}',
    ),
    (
        "isolation-underscore",
        doc(isolation="fixed_share"),
        "parameters.isolation",
        f'parameters.isolation: Unsupported value: "fixed_share": supported values: {ISOLATIONS}',
    ),
    (
        "isolation-trailing-space",
        doc(isolation="exclusive "),
        "parameters.isolation",
        f'parameters.isolation: Unsupported value: "exclusive ": supported values: {ISOLATIONS}',
    ),
    (
        "isolation-empty",
        doc(isolation=""),
        "parameters.isolation",
        f'parameters.isolation: Unsupported value: "": supported values: {ISOLATIONS}',
    ),
    (
        "isolation-long-escaped",
        doc(isolation="\n" + "x" * 100),
        "parameters.isolation",
        f'parameters.isolation: Unsupported value: "\\n{"x" * 63}"...: supported values: '
        + ISOLATIONS,
    ),
    (
        "priority-unknown",
        doc(priority="high"),
        "parameters.priority",
        'parameters.priority: Unsupported value: "high": supported values: "offline", "online"',
    ),
    (
        "preemptible-string",
        doc(preemptible="false"),
        "parameters.preemptible",
        "parameters.preemptible: Invalid type: expected a boolean (true or false), got string",
    ),
    (
        "preemptible-number",
        doc(preemptible=0),
        "parameters.preemptible",
        "parameters.preemptible: Invalid type: expected a boolean (true or false), got number",
    ),
    (
        "placement-unknown",
        doc(placement="pack"),
        "parameters.placement",
        'parameters.placement: Unsupported value: "pack": supported values: "binpack", "spread"',
    ),
    (
        "backend-unknown",
        doc(backend="hami"),
        "parameters.backend",
        'parameters.backend: Unsupported value: "hami": supported values: '
        '"hami-core", "mps", "none"',
    ),
    (
        "apiVersion-missing",
        b'{"kind":"GpuShareConfig"}',
        "parameters.apiVersion",
        f"parameters.apiVersion: Required value: {MUST_API}",
    ),
    (
        "apiVersion-null",
        doc(apiVersion=None),
        "parameters.apiVersion",
        f"parameters.apiVersion: Required value: {MUST_API}",
    ),
    (
        "apiVersion-snake-case",
        b'{"api_version":"gpushare.dra.dev/v1alpha1","kind":"GpuShareConfig"}',
        "parameters.apiVersion",
        f"parameters.apiVersion: Required value: {MUST_API}",
    ),
    (
        "apiVersion-other-group",
        doc(apiVersion="resource.nvidia.com/v1alpha1"),
        "parameters.apiVersion",
        f'parameters.apiVersion: Invalid value: "resource.nvidia.com/v1alpha1": {MUST_API}',
    ),
    (
        "apiVersion-other-version",
        doc(apiVersion="gpushare.dra.dev/v1"),
        "parameters.apiVersion",
        f'parameters.apiVersion: Invalid value: "gpushare.dra.dev/v1": {MUST_API}',
    ),
    (
        "apiVersion-no-version",
        doc(apiVersion="gpushare.dra.dev"),
        "parameters.apiVersion",
        f'parameters.apiVersion: Invalid value: "gpushare.dra.dev": {MUST_API}',
    ),
    (
        "apiVersion-other-driver",
        doc(apiVersion="gpu.example.com/v1alpha1"),
        "parameters.apiVersion",
        f'parameters.apiVersion: Invalid value: "gpu.example.com/v1alpha1": {MUST_API}',
    ),
    (
        "apiVersion-number",
        doc(apiVersion=1),
        "parameters.apiVersion",
        "parameters.apiVersion: Invalid type: expected a string, got number",
    ),
    (
        "kind-missing",
        json.dumps({"apiVersion": API_VERSION}).encode(),
        "parameters.kind",
        'parameters.kind: Required value: must be "GpuShareConfig"',
    ),
    (
        "kind-null",
        doc(kind=None),
        "parameters.kind",
        'parameters.kind: Required value: must be "GpuShareConfig"',
    ),
    (
        "kind-other",
        doc(kind="GpuConfig"),
        "parameters.kind",
        'parameters.kind: Invalid value: "GpuConfig": must be "GpuShareConfig"',
    ),
    (
        "kind-lowercase",
        doc(kind="gpushareconfig"),
        "parameters.kind",
        'parameters.kind: Invalid value: "gpushareconfig": must be "GpuShareConfig"',
    ),
    (
        "kind-list",
        doc(kind=["GpuShareConfig"]),
        "parameters.kind",
        "parameters.kind: Invalid type: expected a string, got array",
    ),
    (
        "version-checked-before-fields",
        json.dumps({"apiVersion": "x/v1", "kind": "Other", "colour": 1}).encode(),
        "parameters.apiVersion",
        f'parameters.apiVersion: Invalid value: "x/v1": {MUST_API}',
    ),
    (
        "top-level-array",
        b"[]",
        "parameters",
        "parameters: Invalid type: expected an object, got array",
    ),
    (
        "top-level-string",
        b'"fixed-share"',
        "parameters",
        "parameters: Invalid type: expected an object, got string",
    ),
    (
        "top-level-number",
        b"42",
        "parameters",
        "parameters: Invalid type: expected an object, got number",
    ),
    (
        "top-level-null",
        b"null",
        "parameters",
        "parameters: Invalid type: expected an object, got null",
    ),
    (
        "top-level-bool",
        b"true",
        "parameters",
        "parameters: Invalid type: expected an object, got boolean",
    ),
    (
        "json-empty",
        b"",
        "parameters",
        "parameters: Invalid JSON: Expecting value at line 1 column 1",
    ),
    (
        "json-truncated",
        b'{"apiVersion":',
        "parameters",
        "parameters: Invalid JSON: Expecting value at line 1 column 15",
    ),
    (
        "json-single-quotes",
        b"{'kind': 'GpuShareConfig'}",
        "parameters",
        "parameters: Invalid JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 2",
    ),
    (
        "json-trailing-comma",
        b'{"kind":"GpuShareConfig",}',
        "parameters",
        "parameters: Invalid JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 26",
    ),
    (
        "json-two-documents",
        b"{} {}",
        "parameters",
        "parameters: Invalid JSON: Extra data at line 1 column 4",
    ),
    (
        "json-control-character",
        b'{"kind":"\x01"}',
        "parameters",
        "parameters: Invalid JSON: Invalid control character at line 1 column 10",
    ),
    (
        "json-nan",
        b'{"priority":NaN}',
        "parameters",
        "parameters: Invalid JSON: NaN is not a JSON value",
    ),
    (
        "json-infinity",
        b'{"priority":-Infinity}',
        "parameters",
        "parameters: Invalid JSON: -Infinity is not a JSON value",
    ),
    (
        "duplicate-field",
        doc()[:-1] + b',"isolation":"exclusive","isolation":"best-effort"}',
        "parameters.isolation",
        "parameters.isolation: Duplicate field: may appear only once",
    ),
    (
        "duplicate-apiVersion",
        b'{"apiVersion":"x/v1",' + doc()[1:],
        "parameters.apiVersion",
        "parameters.apiVersion: Duplicate field: may appear only once",
    ),
    (
        "too-long-by-one-byte",
        padded(MAX_PARAMETERS_BYTES + 1),
        "parameters",
        "parameters: Too long: 10241 bytes, must have at most 10240 bytes",
    ),
    (
        "too-long-deep-array-100000",
        b"[" * 100_000 + b"]" * 100_000,
        "parameters",
        "parameters: Too long: 200000 bytes, must have at most 10240 bytes",
    ),
    ("deep-array-5000", b"[" * 5000 + b"]" * 5000, "parameters", TOO_DEEP),
    ("deep-in-field", doc(isolation=nested(32)), "parameters", TOO_DEEP),
    (
        "not-utf8",
        b'{"kind":"\xff"}',
        "parameters",
        "parameters: Invalid JSON: not valid UTF-8 at byte 9",
    ),
    (
        "utf16",
        '{"kind":"GpuShareConfig"}'.encode("utf-16"),
        "parameters",
        "parameters: Invalid JSON: not valid UTF-8 at byte 0",
    ),
]


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [row[1:] for row in MALFORMED],
    ids=[row[0] for row in MALFORMED],
)
def test_malformed_bytes_are_refused_with_exact_message(raw: bytes, field: str, message: str):
    """Each malformed document is refused with one exact, field-naming message."""
    with pytest.raises(ConfigError) as caught:
        decode_config(raw, NAMES)
    assert str(caught.value) == message
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("raw", "message"),
    [(row[1].decode(), row[3]) for row in MALFORMED if row[0] not in {"not-utf8", "utf16"}],
    ids=[row[0] for row in MALFORMED if row[0] not in {"not-utf8", "utf16"}],
)
def test_malformed_str_gives_the_same_message(raw: str, message: str):
    """JSON text given as str is refused exactly like the same text as bytes."""
    with pytest.raises(ConfigError) as caught:
        decode_config(raw, NAMES)
    assert str(caught.value) == message


def test_too_deep_is_one_level_past_the_limit():
    """Nesting up to 32 levels reaches the field checks; 33 levels is refused as too deep."""
    with pytest.raises(ConfigError) as caught:
        decode_config(doc(isolation=nested(31)), NAMES)
    assert str(caught.value) == "parameters.isolation: Invalid type: expected a string, got array"


def test_brackets_inside_strings_do_not_count_as_nesting():
    """Brackets inside a string value (with escaped quotes) are not nesting."""
    with pytest.raises(ConfigError) as caught:
        decode_config(doc(kind='\\"' + "[" * 100), NAMES)
    assert caught.value.field == "parameters.kind"
    assert caught.value.reason is Reason.INVALID_VALUE


def test_lone_surrogate_in_str_is_refused():
    """A str with a lone surrogate, which has no UTF-8 encoding, is refused as invalid JSON."""
    with pytest.raises(ConfigError) as caught:
        decode_config('{"kind":"\ud800"}', NAMES)
    assert str(caught.value) == "parameters: Invalid JSON: not valid UTF-8 at byte 9"


def test_mapping_with_unencodable_value_is_refused():
    """A dict holding a value with no JSON form is refused, not a TypeError."""
    with pytest.raises(ConfigError) as caught:
        decode_config({**HEAD, "isolation": {"fixed-share"}}, NAMES)
    assert str(caught.value) == (
        "parameters: Invalid JSON: cannot be encoded as JSON: "
        "Object of type set is not JSON serializable"
    )


def test_mapping_nested_100000_deep_is_refused():
    """A dict holding an array nested 100000 levels deep is refused, not a RecursionError."""
    with pytest.raises(ConfigError) as caught:
        decode_config({**HEAD, "isolation": nested(100_000)}, NAMES)
    assert str(caught.value) == TOO_DEEP


def test_mapping_size_is_its_compact_utf8_encoding():
    """A dict is measured by its compact UTF-8 JSON encoding, multi-byte characters included."""
    with pytest.raises(ConfigError) as caught:
        decode_config({"isolation": "é" * 6000}, NAMES)
    assert str(caught.value) == "parameters: Too long: 12016 bytes, must have at most 10240 bytes"


def test_size_limit_is_inclusive():
    """A document of exactly 10240 bytes is accepted; the limit is the API server's own."""
    assert decode_config(padded(MAX_PARAMETERS_BYTES), NAMES) == GpuShareConfig()


def test_path_prefixes_every_field():
    """The caller's path prefixes the field, so the webhook can name the full location."""
    path = "spec.devices.config[2].opaque.parameters"
    with pytest.raises(ConfigError) as caught:
        decode_config(doc(isolation="fast"), NAMES, path=path)
    assert caught.value.field == f"{path}.isolation"
    assert str(caught.value).startswith(f'{path}.isolation: Unsupported value: "fast": ')


def test_error_carries_reason_and_allowed_values():
    """ConfigError exposes the reason and the allowed values for programs, not only the text."""
    with pytest.raises(ConfigError) as caught:
        decode_config(doc(priority="high"), NAMES)
    assert caught.value.reason is Reason.UNSUPPORTED_VALUE
    assert caught.value.allowed == ("offline", "online")
    assert isinstance(caught.value, ValueError)


ALL_SET = GpuShareConfig(Isolation.FIXED_SHARE, Priority.OFFLINE, Placement.SPREAD, Backend.MPS)
ALL_SET_MEMBERS = {
    "isolation": "fixed-share",
    "priority": "offline",
    "placement": "spread",
    "backend": "mps",
}

VALID: list[tuple[str, bytes | str | dict[str, object], GpuShareConfig]] = [
    ("bytes-minimal", doc(), GpuShareConfig()),
    ("bytes-all-fields", doc(**ALL_SET_MEMBERS), ALL_SET),
    ("str-all-fields", doc(**ALL_SET_MEMBERS).decode(), ALL_SET),
    ("dict-all-fields", {**HEAD, **ALL_SET_MEMBERS}, ALL_SET),
    ("dict-one-field", {**HEAD, "isolation": "exclusive"}, GpuShareConfig(Isolation.EXCLUSIVE)),
    (
        "nulls-are-unset",
        doc(isolation=None, priority="online", placement=None, backend=None),
        GpuShareConfig(priority=Priority.ONLINE),
    ),
    (
        "pretty-and-reordered",
        '{\n  "backend": "none",\n  "kind": "GpuShareConfig",\n'
        '  "apiVersion": "gpushare.dra.dev/v1alpha1"\n}\n',
        GpuShareConfig(backend=Backend.NONE),
    ),
    (
        "design-example",
        doc(isolation="fixed-share", priority="online"),
        GpuShareConfig(Isolation.FIXED_SHARE, Priority.ONLINE),
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [row[1:] for row in VALID], ids=[row[0] for row in VALID]
)
def test_valid_input_decodes(raw: bytes | str | dict[str, object], expected: GpuShareConfig):
    """Valid documents as bytes, str or dict decode to the expected config."""
    assert decode_config(raw, NAMES) == expected


def test_read_only_mapping_decodes():
    """Any Mapping is accepted, not only dict."""
    raw = MappingProxyType({**HEAD, "placement": "binpack"})
    assert decode_config(raw, NAMES) == GpuShareConfig(placement=Placement.BINPACK)


def test_custom_driver_name_accepts_its_own_api_version():
    """With another driver name, the config's apiVersion is that name's group."""
    raw = {
        "apiVersion": "gpu.example.com/v1alpha1",
        "kind": "GpuShareConfig",
        "priority": "offline",
    }
    assert decode_config(raw, CUSTOM) == GpuShareConfig(priority=Priority.OFFLINE)


def test_custom_driver_name_rejects_the_default_api_version():
    """With another driver name, the default driver's apiVersion is refused."""
    with pytest.raises(ConfigError) as caught:
        decode_config(doc(), CUSTOM)
    assert str(caught.value) == (
        'parameters.apiVersion: Invalid value: "gpushare.dra.dev/v1alpha1": '
        'must be "gpu.example.com/v1alpha1"'
    )


def test_to_parameters_writes_only_set_fields():
    """to_parameters writes apiVersion, kind and only the fields that are set."""
    config = GpuShareConfig(isolation=Isolation.BEST_EFFORT, backend=Backend.HAMI_CORE)
    assert config.to_parameters(CUSTOM) == {
        "apiVersion": "gpu.example.com/v1alpha1",
        "kind": "GpuShareConfig",
        "isolation": "best-effort",
        "backend": "hami-core",
    }


@given(configs, st.sampled_from([NAMES, CUSTOM]))
def test_round_trip_through_parameters(config: GpuShareConfig, names: DriverNames):
    """Every config survives to_parameters and decode_config, as a dict and as JSON text."""
    parameters = config.to_parameters(names)
    assert decode_config(parameters, names) == config
    assert decode_config(json.dumps(parameters), names) == config


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)


@given(st.binary(max_size=200) | json_values.map(lambda value: json.dumps(value).encode()))
def test_any_bytes_either_decode_or_raise_config_error(raw: bytes):
    """No input makes the decoder raise anything but ConfigError."""
    with contextlib.suppress(ConfigError):
        decode_config(raw, NAMES)


@pytest.mark.parametrize(
    ("members", "cores", "memory"),
    [
        ({"cores": 30}, 30, None),
        ({"cores": "30"}, 30, None),
        ({"cores": 0}, 0, None),
        ({"cores": 100.0}, 100, None),
        ({"cores": "100", "memory": "512Mi"}, 100, 512 * 1024**2),
        ({"memory": "5Gi"}, None, 5 * 1024**3),
        ({"memory": "2Ti"}, None, 2 * 1024**4),
        ({"cores": None, "memory": None}, None, None),
    ],
)
def test_sizes_decode_to_cores_and_bytes(members: dict[str, object], cores: int, memory: int):
    """cores decode from a number or its text to an int, memory from Mi/Gi/Ti text to bytes."""
    config = decode_config(doc(**members), NAMES)
    assert (config.cores, config.memory) == (cores, memory)
    assert config.effective().sized is (cores is not None or memory is not None)


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"cores": 101}, 'parameters.cores: Invalid value: "101": must be a whole number from 0'),
        ({"cores": -1}, 'parameters.cores: Invalid value: "-1": must be a whole number'),
        ({"cores": 30.5}, 'parameters.cores: Invalid value: "30.5": must be a whole number'),
        ({"cores": "30.0"}, 'parameters.cores: Invalid value: "30.0": must be a whole number'),
        ({"cores": "030"}, 'parameters.cores: Invalid value: "030": must be a whole'),
        ({"cores": True}, "parameters.cores: Invalid type: expected a number or a string, got b"),
        ({"cores": [30]}, "parameters.cores: Invalid type: expected a number or a string, got a"),
        ({"memory": "5G"}, 'parameters.memory: Invalid value: "5G": must be a whole number of Mi'),
        ({"memory": "1.5Gi"}, 'parameters.memory: Invalid value: "1.5Gi": must be a whole'),
        ({"memory": "0Mi"}, 'parameters.memory: Invalid value: "0Mi": must be a whole number'),
        ({"memory": "1024Ki"}, 'parameters.memory: Invalid value: "1024Ki": must be a whole'),
        ({"memory": 5368709120}, "parameters.memory: Invalid type: expected a string, got num"),
    ],
)
def test_bad_sizes_name_the_field_and_the_rule(members: dict[str, object], message: str):
    """A size out of range, fractional or in another form is refused naming field and rule."""
    with pytest.raises(ConfigError) as caught:
        decode_config(doc(**members), NAMES)
    assert str(caught.value).startswith(message)


def test_a_huge_exponent_is_refused_without_building_the_number():
    """cores 1e999999999 is refused at once: the range is checked before any int is built."""
    with pytest.raises(ConfigError, match=r"parameters\.cores: Invalid value"):
        decode_config(
            b'{"apiVersion":"%s","kind":"GpuShareConfig","cores":1e999999999}'
            % API_VERSION.encode(),
            NAMES,
        )


def test_sizes_are_written_back_in_the_largest_whole_unit():
    """to_parameters writes cores as text and memory in Ti, Gi or Mi, whichever divides it."""
    config = GpuShareConfig(cores=25, memory=3 * 1024**3)
    assert config.to_parameters(NAMES)["cores"] == "25"
    assert config.to_parameters(NAMES)["memory"] == "3Gi"
    assert GpuShareConfig(memory=1536 * 1024**2).to_parameters(NAMES)["memory"] == "1536Mi"
