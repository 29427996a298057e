"""Regression tests for review findings in the CDI edits."""

from __future__ import annotations

from cdi.factories import GIB, HOST, MIB, UID, card, config, share

from dra_driver.api import Isolation
from dra_driver.cdi import build_edits
from dra_driver.publishing.slices import published_memory


def test_exclusive_whole_card_on_a_card_off_the_mib_grid() -> None:
    """A whole-card share as the scheduler allocates it (the published default) is exclusive."""
    odd = card(0, 0x3B, memory=16 * GIB - 300 * 1024)  # not a multiple of 1 MiB
    whole = published_memory(odd)  # the capacity's value and requestPolicy default
    assert whole % MIB == 0
    edits = build_edits(
        UID, [share(odd, cores=100, memory=whole)], config(Isolation.EXCLUSIVE), HOST
    )
    assert f"GPUSHARE_MEMORY_BYTES_0={whole}" in edits.env
