"""Cached objects made small: every key and short string interned, equal parts kept once.

Informers of the components hold thousands of objects whose keys (``"metadata"``,
``"resource.k8s.io/v1"``) and many values (names, a template's spec, a node's selector) repeat;
:func:`compact` and :class:`SharedParts` make each repeated piece one object. Safe only because
no component changes a cached object in place (their writes work on copies).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final

from dra_driver.k8s.objects import Object

SHARED_PARTS: Final = 4096
"""Distinct shared parts remembered; past it the table starts over (sharing, not caching)."""
_SHORT: Final = 64
"""Strings up to this long are interned: names, kinds, versions, label values."""


def compact(value: Any) -> Any:  # noqa: ANN401 - any JSON value
    """Return ``value`` with every key and short string interned (equal, and smaller)."""
    if isinstance(value, dict):
        return {sys.intern(key): compact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [compact(item) for item in value]
    if isinstance(value, str) and len(value) <= _SHORT:
        return sys.intern(value)
    return value


def pick(source: object, keys: Iterable[str]) -> Object:
    """Return the entries of ``source`` (if a mapping) under ``keys``."""
    if not isinstance(source, Mapping):
        return {}
    return {key: source[key] for key in keys if key in source}


class SharedParts:
    """A bounded table of parts seen, keyed by their JSON: equal parts become one object."""

    def __init__(self, limit: int = SHARED_PARTS) -> None:
        self._limit = limit
        self._parts: dict[str, Any] = {}

    def shared(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        """Return the part equal to ``value`` seen before, else remember ``value``."""
        key = json.dumps(value, sort_keys=True, separators=(",", ":"))
        found = self._parts.get(key)
        if found is None:
            if len(self._parts) >= self._limit:
                self._parts.clear()  # parts seen before stay shared where they are
            found = self._parts[key] = value
        return found

    def share(self, parent: object, *keys: str) -> None:
        """Replace each of ``keys`` in ``parent`` (a dict) by its shared part."""
        if isinstance(parent, dict):
            for key in keys:
                if key in parent:
                    parent[key] = self.shared(parent[key])
