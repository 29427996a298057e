"""Freezing what start-up left, so the cyclic collector stops walking it."""

from __future__ import annotations

import gc

from dra_driver.k8s.heap import freeze_startup_heap


def test_objects_alive_at_start_up_are_frozen_and_later_ones_are_not() -> None:
    """After the freeze, start-up's objects are out of the collector's reach, new ones are not."""
    before = [{"start-up": index} for index in range(100)]
    try:
        frozen = freeze_startup_heap()
        after: list[list[str]] = [[]]  # a list of a list: always tracked
        tracked = {id(obj) for obj in gc.get_objects()}
        assert frozen >= len(before)
        assert not any(id(obj) in tracked for obj in before)
        assert id(after) in tracked
    finally:
        gc.unfreeze()
