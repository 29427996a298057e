"""The driver name's validation and every name derived from it."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames, InvalidDriverNameError

RULE = (
    "must be a lowercase DNS subdomain (RFC 1123): dot-separated labels of lowercase "
    'letters, digits and "-", each starting and ending with a letter or digit'
)
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

DERIVED: list[tuple[str, str, str]] = [
    ("driver", "gpushare.dra.dev", "gpu.example.com"),
    ("config_api_version", "gpushare.dra.dev/v1alpha1", "gpu.example.com/v1alpha1"),
    ("config_kind", "GpuShareConfig", "GpuShareConfig"),
    ("finalizer", "gpushare.dra.dev/allocation", "gpu.example.com/allocation"),
    ("scheduling_gate", "gpushare.dra.dev/allocation", "gpu.example.com/allocation"),
    ("cdi_vendor", "k8s.gpushare.dra.dev", "k8s.gpu.example.com"),
    ("cdi_class", "claim", "claim"),
    ("cdi_kind", "k8s.gpushare.dra.dev/claim", "k8s.gpu.example.com/claim"),
    ("default_device_class", "gpushare.dra.dev", "gpu.example.com"),
    ("online_device_class", "online.gpushare.dra.dev", "online.gpu.example.com"),
    ("offline_device_class", "offline.gpushare.dra.dev", "offline.gpu.example.com"),
]


@pytest.mark.parametrize(
    ("attribute", "default", "custom"),
    DERIVED,
    ids=[row[0] for row in DERIVED],
)
def test_derived_names(attribute: str, default: str, custom: str):
    """Each derived name follows the driver name, for the default and for a custom name."""
    assert getattr(DriverNames.for_driver(DEFAULT_DRIVER_NAME), attribute) == default
    assert getattr(DriverNames.for_driver("gpu.example.com"), attribute) == custom


def test_default_driver_name():
    """The default driver name is the one the README and docs/resource-model.md document."""
    assert DEFAULT_DRIVER_NAME == "gpushare.dra.dev"


INVALID: list[tuple[str, str, str]] = [
    ("empty", "", 'invalid driver name "": must not be empty'),
    ("uppercase", "GpuShare.dra.dev", f'invalid driver name "GpuShare.dra.dev": {RULE}'),
    ("underscore", "gpu_share.dra.dev", f'invalid driver name "gpu_share.dra.dev": {RULE}'),
    (
        "too-long",
        "a" * 60 + ".dev",
        f'invalid driver name "{"a" * 60}.dev": must have at most 63 characters, has 64',
    ),
    (
        "no-dot",
        "gpushare",
        'invalid driver name "gpushare": must contain a dot, as it is also an API group '
        '(e.g. "gpushare.dra.dev")',
    ),
    ("leading-dash", "-gpushare.dra.dev", f'invalid driver name "-gpushare.dra.dev": {RULE}'),
    ("label-ends-in-dash", "gpushare-.dev", f'invalid driver name "gpushare-.dev": {RULE}'),
    ("leading-dot", ".dra.dev", f'invalid driver name ".dra.dev": {RULE}'),
    ("trailing-dot", "gpushare.dra.dev.", f'invalid driver name "gpushare.dra.dev.": {RULE}'),
    ("empty-label", "gpushare..dev", f'invalid driver name "gpushare..dev": {RULE}'),
    ("path-traversal", "../x", f'invalid driver name "../x": {RULE}'),
    ("slash", "gpushare.dra.dev/x", f'invalid driver name "gpushare.dra.dev/x": {RULE}'),
    ("space", "gpu share.dev", f'invalid driver name "gpu share.dev": {RULE}'),
    ("non-ascii", "gpü.dev", f'invalid driver name "gp\\u00fc.dev": {RULE}'),
    (
        "trailing-newline",
        "gpushare.dra.dev\n",
        f'invalid driver name "gpushare.dra.dev\\n": {RULE}',
    ),
]


@pytest.mark.parametrize(
    ("name", "message"), [row[1:] for row in INVALID], ids=[row[0] for row in INVALID]
)
def test_invalid_driver_names_are_refused(name: str, message: str):
    """An unusable driver name is refused with a message naming the value and the rule."""
    with pytest.raises(InvalidDriverNameError) as caught:
        DriverNames.for_driver(name)
    assert str(caught.value) == message


def test_longest_allowed_name():
    """A name of exactly 63 characters is accepted."""
    name = "a" * 59 + ".dev"
    assert DriverNames.for_driver(name).driver == name


def test_direct_construction_validates_too():
    """Constructing DriverNames directly validates, so no instance holds a bad name."""
    with pytest.raises(InvalidDriverNameError):
        DriverNames("Bad_Name")
    assert issubclass(InvalidDriverNameError, ValueError)


def test_driver_names_are_immutable():
    """DriverNames is frozen: the name cannot change after validation."""
    names = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
    with pytest.raises(dataclasses.FrozenInstanceError):
        names.driver = "x.y"  # type: ignore[misc]


LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)


@given(st.lists(LABEL, min_size=2, max_size=5).map(".".join).filter(lambda name: len(name) <= 63))
def test_derived_names_of_any_valid_driver_are_valid_kubernetes_names(name: str):
    """For every valid driver name, device classes are DNS subdomains and gates are qualified."""
    names = DriverNames.for_driver(name)
    for device_class in (
        names.default_device_class,
        names.online_device_class,
        names.offline_device_class,
    ):
        assert len(device_class) <= 253
        assert DNS_SUBDOMAIN.fullmatch(device_class)
    for qualified in (names.finalizer, names.scheduling_gate, names.config_api_version):
        prefix, _, suffix = qualified.partition("/")
        assert prefix == name
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", suffix)
