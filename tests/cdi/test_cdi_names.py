"""Name checks and the CDI names built from them: hostile values never become paths or IDs."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePosixPath

import pytest
from cdi.factories import SHARE_1, SHARE_2, UID
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.api import DriverNames
from dra_driver.cdi import (
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

LABEL_RULE = (
    'must contain only lowercase letters, digits and "-", and start and end with a letter or digit'
)
SHARE_RULE = (
    "must be a UUID in canonical lowercase form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits)"
)
ENV_RULE = 'must not contain "=", "," or control characters such as newline or NUL'
DEFAULT = DriverNames.for_driver("gpushare.dra.dev")
CUSTOM = DriverNames.for_driver("gpu.example.com")

LABEL_CHECKS: list[tuple[str, Callable[[object], str]]] = [
    ("claim UID", check_claim_uid),
    ("device name", check_device_name),
    ("request name", check_request_name),
]

# (value, rule): every one of these would escape a file name, an env value or a CDI name.
HOSTILE_LABELS: list[tuple[object, str]] = [
    ("../etc", LABEL_RULE),
    ("..", LABEL_RULE),
    ("a/b", LABEL_RULE),
    ("/abs", LABEL_RULE),
    ("A", LABEL_RULE),
    ("Gpu-0", LABEL_RULE),
    ("gpu\u00e9", LABEL_RULE),
    ("\uff41", LABEL_RULE),  # fullwidth "a"
    ("a" * 64, "must have at most 63 characters, has 64"),
    ("", "must not be empty"),
    ("a\x00b", LABEL_RULE),
    ("gpu-0\n", LABEL_RULE),
    ("a\nb", LABEL_RULE),
    ("-a", LABEL_RULE),
    ("a-", LABEL_RULE),
    ("a.b", LABEL_RULE),
    ("a b", LABEL_RULE),
    ("a=b", LABEL_RULE),
    ("a_b", LABEL_RULE),
    (5, "must be a string, not int"),
    (None, "must be a string, not NoneType"),
]


@pytest.mark.parametrize(("field", "check"), LABEL_CHECKS, ids=[f for f, _ in LABEL_CHECKS])
@pytest.mark.parametrize("value", ["a", "0", "gpu-0", UID, "a" * 63, "x-1-y"])
def test_label_checks_accept_dns_labels(
    field: str, check: Callable[[object], str], value: str
) -> None:
    """Each label check returns a lowercase DNS label of up to 63 characters unchanged."""
    assert check(value) == value


@pytest.mark.parametrize(("field", "check"), LABEL_CHECKS, ids=[f for f, _ in LABEL_CHECKS])
@pytest.mark.parametrize(("value", "rule"), HOSTILE_LABELS, ids=repr)
def test_label_checks_refuse_hostile_values(
    field: str, check: Callable[[object], str], value: object, rule: str
) -> None:
    """Traversal, slashes, capitals, unicode, overlong, empty, NUL and newline are refused."""
    with pytest.raises(UnsafeNameError) as caught:
        check(value)
    assert caught.value.field == field
    assert caught.value.rule == rule
    assert str(caught.value).startswith(f"invalid {field} ")
    assert str(caught.value).endswith(f": {rule}")


def test_unsafe_name_message_shows_the_value_escaped() -> None:
    """The message quotes the value as JSON, so a newline or NUL is visible, not acted on."""
    with pytest.raises(UnsafeNameError) as caught:
        check_claim_uid("../etc\n\x00")
    assert str(caught.value) == f'invalid claim UID "../etc\\n\\u0000": {LABEL_RULE}'


def test_unsafe_name_message_shortens_long_values() -> None:
    """A huge value is shown by its start only, so one claim cannot flood the logs."""
    with pytest.raises(UnsafeNameError) as caught:
        check_device_name("a" * 5000)
    assert str(caught.value) == (
        f'invalid device name "{"a" * 64}"...: must have at most 63 characters, has 5000'
    )


def test_unsafe_name_error_is_a_value_error() -> None:
    """Callers that handle ValueError also handle unsafe names."""
    assert issubclass(UnsafeNameError, ValueError)


@pytest.mark.parametrize(
    "value",
    [
        SHARE_2.upper(),
        SHARE_1.replace("-", ""),
        "{" + SHARE_1 + "}",
        SHARE_1 + "\n",
        SHARE_1[:-1],
        SHARE_1 + "0",
        "../" + SHARE_1,
        "g" + SHARE_1[1:],
        "",
    ],
    ids=repr,
)
def test_share_id_must_be_a_canonical_lowercase_uuid(value: str) -> None:
    """Share IDs other than a canonical lowercase UUID are refused with the UUID rule."""
    with pytest.raises(UnsafeNameError) as caught:
        check_share_id(value)
    assert caught.value.field == "share ID"
    assert caught.value.rule in (SHARE_RULE, "must not be empty")


def test_share_id_accepts_a_canonical_uuid() -> None:
    """A scheduler-written share ID passes unchanged."""
    assert check_share_id(SHARE_1) == SHARE_1


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("GPU-5f6e2bd7-0b6c-4d21-9d2e-3a8f3c1e7a01", True),
        ("MIG-5f6e2bd7-0b6c-4d21-9d2e-3a8f3c1e7a01", True),
        ("GPU-a,GPU-b", False),
        ("GPU-a=b", False),
        ("MIG-GPU-x/1/0", False),
        ("GPU-a\n", False),
        ("-GPU", False),
        ("G" * 129, False),
    ],
    ids=repr,
)
def test_card_uuid_check(value: str, accepted: bool) -> None:
    """Card UUIDs may hold only what a comma-separated env list can carry."""
    if accepted:
        assert check_card_uuid(value) == value
    else:
        with pytest.raises(UnsafeNameError, match=r"^invalid card UUID "):
            check_card_uuid(value)


@pytest.mark.parametrize("value", ["a=b", "a,b", "a\nb", "a\x00b", "a\x7fb", "a\rb", "\t", ""])
def test_env_value_check_refuses_separators_and_controls(value: str) -> None:
    """An outside value with "=", ",", newline, NUL or another control character is refused."""
    with pytest.raises(UnsafeNameError) as caught:
        check_env_value("claim UID", value)
    assert caught.value.rule in (ENV_RULE, "must not be empty")


def test_env_value_check_accepts_plain_values() -> None:
    """A plain value passes unchanged."""
    assert check_env_value("card UUID", "GPU-1234-abcd") == "GPU-1234-abcd"


def test_cdi_device_name_with_and_without_share() -> None:
    """The device name is <claimUID>-<device>[-<shareID>], as docs/enforcement.md spells it."""
    assert cdi_device_name(UID, "gpu-0", SHARE_1) == f"{UID}-gpu-0-{SHARE_1}"
    assert cdi_device_name(UID, "gpu-0", None) == f"{UID}-gpu-0"


@pytest.mark.parametrize(
    ("uid", "device", "share_id", "field"),
    [
        ("../x", "gpu-0", None, "claim UID"),
        (UID, "gpu/0", None, "device name"),
        (UID, "gpu-0", "not-a-uuid", "share ID"),
        (UID, "GPU-0", SHARE_1, "device name"),
    ],
)
def test_cdi_device_name_checks_every_part(
    uid: str, device: str, share_id: str | None, field: str
) -> None:
    """Each part of a CDI device name is checked, and the error names the part."""
    with pytest.raises(UnsafeNameError) as caught:
        cdi_device_name(uid, device, share_id)
    assert caught.value.field == field


def test_qualified_name_uses_the_driver_kind() -> None:
    """The CDI ID is <vendor>/<class>=<name>, derived from the driver name."""
    name = f"{UID}-gpu-0"
    assert qualified_name(DEFAULT, name) == f"k8s.gpushare.dra.dev/claim={name}"
    assert qualified_name(CUSTOM, name) == f"k8s.gpu.example.com/claim={name}"


@pytest.mark.parametrize("name", ["", "-a", "a-", "a/b", "a=b", "a b", "a\n", "\u00e9"], ids=repr)
def test_qualified_name_refuses_names_cdi_refuses(name: str) -> None:
    """A name outside CDI's device-name alphabet never becomes a CDI ID."""
    with pytest.raises(UnsafeNameError, match=r"^invalid CDI device name "):
        qualified_name(DEFAULT, name)


def test_qualified_name_accepts_the_whole_cdi_alphabet() -> None:
    """Letters of both cases, digits and "_-.:" inside are what CDI's parser allows."""
    assert qualified_name(DEFAULT, "A0_b-c.d:e9").endswith("=A0_b-c.d:e9")


def test_spec_file_name_is_the_transient_spec_name() -> None:
    """The spec file is <vendor>-<class>_<claimUID>.json, as docs/enforcement.md spells it."""
    assert spec_file_name(DEFAULT, UID) == f"k8s.gpushare.dra.dev-claim_{UID}.json"
    assert spec_file_name(CUSTOM, UID) == f"k8s.gpu.example.com-claim_{UID}.json"


@pytest.mark.parametrize("uid", ["../../etc/passwd", "a/b", "..", "", "x\x00"], ids=repr)
def test_spec_file_name_refuses_unsafe_uids(uid: str) -> None:
    """No claim UID can steer the spec file out of the CDI directory."""
    with pytest.raises(UnsafeNameError, match=r"^invalid claim UID "):
        spec_file_name(DEFAULT, uid)


@given(st.text(max_size=80))
def test_any_accepted_uid_is_one_plain_file_name_component(uid: str) -> None:
    """Whatever text comes in, an accepted UID is a single safe path component."""
    try:
        check_claim_uid(uid)
    except UnsafeNameError:
        return
    name = spec_file_name(DEFAULT, uid)
    assert PurePosixPath(name).name == name
    assert re.fullmatch(r"[a-z0-9-]{1,63}", uid)
    assert uid not in (".", "..")
