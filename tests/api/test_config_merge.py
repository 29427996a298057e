"""Merging config entries field by field, and the defaults of the effective config."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.api import (
    DEFAULT_ISOLATION,
    DEFAULT_PRIORITY,
    Backend,
    EffectiveConfig,
    GpuShareConfig,
    Isolation,
    Placement,
    Priority,
    merge_configs,
)

configs = st.builds(
    GpuShareConfig,
    isolation=st.none() | st.sampled_from(Isolation),
    priority=st.none() | st.sampled_from(Priority),
    placement=st.none() | st.sampled_from(Placement),
    backend=st.none() | st.sampled_from(Backend),
)

ONLINE_CLASS = GpuShareConfig(priority=Priority.ONLINE)
OFFLINE_CLASS = GpuShareConfig(priority=Priority.OFFLINE, isolation=Isolation.BEST_EFFORT)

MERGES: list[tuple[str, list[GpuShareConfig], GpuShareConfig]] = [
    ("empty", [], GpuShareConfig()),
    ("one-entry", [OFFLINE_CLASS], OFFLINE_CLASS),
    (
        "claim-adds-a-field",
        [ONLINE_CLASS, GpuShareConfig(isolation=Isolation.FIXED_SHARE)],
        GpuShareConfig(Isolation.FIXED_SHARE, Priority.ONLINE),
    ),
    (
        "claim-overrides-class",
        [OFFLINE_CLASS, GpuShareConfig(priority=Priority.ONLINE)],
        GpuShareConfig(Isolation.BEST_EFFORT, Priority.ONLINE),
    ),
    (
        "unset-does-not-override",
        [OFFLINE_CLASS, GpuShareConfig()],
        OFFLINE_CLASS,
    ),
    (
        "later-claim-entry-wins",
        [
            GpuShareConfig(placement=Placement.BINPACK),
            GpuShareConfig(placement=Placement.SPREAD, backend=Backend.MPS),
            GpuShareConfig(backend=Backend.HAMI_CORE),
        ],
        GpuShareConfig(placement=Placement.SPREAD, backend=Backend.HAMI_CORE),
    ),
]


@pytest.mark.parametrize(
    ("entries", "expected"), [row[1:] for row in MERGES], ids=[row[0] for row in MERGES]
)
def test_merge_later_entries_win_field_by_field(
    entries: list[GpuShareConfig], expected: GpuShareConfig
):
    """Later entries override earlier ones only in the fields they set."""
    assert merge_configs(entries) == expected


def test_merge_accepts_any_iterable():
    """merge_configs takes a generator, as when filtering a claim's config entries."""
    entries = (config for config in [ONLINE_CLASS, OFFLINE_CLASS])
    assert merge_configs(entries) == OFFLINE_CLASS


EFFECTIVE: list[tuple[str, GpuShareConfig, EffectiveConfig]] = [
    (
        "nothing-set",
        GpuShareConfig(),
        EffectiveConfig(Isolation.BURST_SHARE, Priority.ONLINE, None, None),
    ),
    (
        "all-set",
        GpuShareConfig(Isolation.EXCLUSIVE, Priority.OFFLINE, Placement.SPREAD, Backend.NONE),
        EffectiveConfig(Isolation.EXCLUSIVE, Priority.OFFLINE, Placement.SPREAD, Backend.NONE),
    ),
    (
        "placement-only",
        GpuShareConfig(placement=Placement.BINPACK),
        EffectiveConfig(Isolation.BURST_SHARE, Priority.ONLINE, Placement.BINPACK, None),
    ),
]


@pytest.mark.parametrize(
    ("config", "expected"), [row[1:] for row in EFFECTIVE], ids=[row[0] for row in EFFECTIVE]
)
def test_effective_applies_defaults(config: GpuShareConfig, expected: EffectiveConfig):
    """effective() fills isolation and priority and leaves placement and backend to others."""
    assert config.effective() == expected


def test_documented_defaults():
    """The defaults are burst-share isolation and online priority, as documented."""
    assert DEFAULT_ISOLATION is Isolation.BURST_SHARE
    assert DEFAULT_PRIORITY is Priority.ONLINE


def test_configs_are_immutable():
    """Configs are frozen, so a merged result can be shared without copying."""
    config = GpuShareConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.isolation = Isolation.EXCLUSIVE  # type: ignore[misc]


@given(configs, configs, configs)
def test_merge_is_associative(a: GpuShareConfig, b: GpuShareConfig, c: GpuShareConfig):
    """Merging in groups gives the same result as merging the flat list."""
    flat = merge_configs([a, b, c])
    assert merge_configs([merge_configs([a, b]), c]) == flat
    assert merge_configs([a, merge_configs([b, c])]) == flat


@given(configs, configs)
def test_merge_takes_each_field_from_the_later_entry_if_set(a: GpuShareConfig, b: GpuShareConfig):
    """For every field, merge([a, b]) has b's value if b sets it and a's value otherwise."""
    merged = merge_configs([a, b])
    for field in dataclasses.fields(GpuShareConfig):
        later = getattr(b, field.name)
        assert getattr(merged, field.name) == (
            later if later is not None else getattr(a, field.name)
        )


@given(configs)
def test_empty_config_is_the_identity(config: GpuShareConfig):
    """An entry that sets nothing changes nothing, before or after."""
    assert merge_configs([GpuShareConfig(), config]) == config
    assert merge_configs([config, GpuShareConfig()]) == config
