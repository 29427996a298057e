"""Object storage: one global resourceVersion, per-resource objects and a bounded event history.

Stored objects are immutable once committed (readers share them without copying); every write
commits a fresh dict. One lock guards everything; each resource has a condition variable on
that lock so watchers sleep until their resource changes. A write that loses its
compare-and-swap to a concurrent one is retried by :func:`guaranteed`.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

from dra_driver.k8s import objects
from gpushare_simulator.harness.apiserver import errors, rawext
from gpushare_simulator.harness.apiserver.rawext import EMPTY, Raws
from gpushare_simulator.harness.apiserver.resources import ResourceType

JSON = dict[str, Any]
Key = tuple[str, str]
T = TypeVar("T")
_MAX_ATTEMPTS: Final = 64
_DUMPS: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class Entry:
    """One committed object version; ``obj`` is shared and must never be mutated.

    ``raws`` are the kept texts of its RawExtension values (see
    :mod:`~gpushare_simulator.harness.apiserver.rawext`), by path.
    """

    __slots__ = ("_raw", "obj", "prefix", "raws")

    def __init__(self, rtype: ResourceType, obj: JSON, raws: Raws = EMPTY) -> None:
        self.obj = obj
        self.raws = raws
        self.prefix = f'{{"kind":"{rtype.kind}","apiVersion":"{rtype.api_version}",'.encode()
        self._raw: bytes | None = None

    @property
    def item(self) -> bytes:
        """JSON without ``kind``/``apiVersion``: how the object appears inside a list."""
        if self._raw is None:
            body = {k: v for k, v in self.obj.items() if k not in {"kind", "apiVersion"}}
            text = rawext.render(body, self.raws, _DUMPS) if self.raws else _DUMPS(body)
            self._raw = text.encode()
        return self._raw

    @property
    def full(self) -> bytes:
        """JSON of the whole object, ``kind`` and ``apiVersion`` first."""
        return self.prefix + self.item[1:]

    @property
    def rv(self) -> int:
        """The object's resourceVersion."""
        return int(self.obj["metadata"]["resourceVersion"])

    def copy(self) -> JSON:
        """Return a private deep copy, with ``kind`` and ``apiVersion``."""
        result: JSON = json.loads(self.full)
        return result


class Event:
    """One change of one resource, as watchers see it."""

    __slots__ = ("_line", "entry", "prev", "rv", "type")

    def __init__(self, rv: int, kind: str, entry: Entry, prev: Entry | None) -> None:
        self.rv = rv
        self.type = kind
        self.entry = entry  # the new state; for DELETED the last state at the deletion's rv
        self.prev = prev
        self._line: bytes | None = None

    @property
    def line(self) -> bytes:
        """The newline-terminated watch line ``{"type":..,"object":..}``."""
        if self._line is None:
            self._line = watch_line(self.type, self.entry.full)
        return self._line


def watch_line(kind: str, obj: bytes) -> bytes:
    """Frame one watch event."""
    return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}\n"


def with_rv(rtype: ResourceType, entry: Entry, rv: int) -> Entry:
    """Return a shallow copy of ``entry`` stamped with another resourceVersion."""
    obj = dict(entry.obj)
    obj["metadata"] = {**entry.obj["metadata"], "resourceVersion": str(rv)}
    return Entry(rtype, obj, entry.raws)


class Bucket:
    """The objects and recent events of one resource."""

    def __init__(self, rtype: ResourceType, lock: threading.Lock, history: int) -> None:
        self.rtype = rtype
        self.objects: dict[Key, Entry] = {}
        self.events: deque[Event] = deque()
        self.history = max(1, history)
        self.oldest = 1  # a watch from rv < oldest - 1 is too old (the watch cache's rule)
        self.cond = threading.Condition(lock)
        self._sorted: list[Key] | None = None

    def sorted_keys(self) -> list[Key]:
        """Keys in etcd order (namespace, then name); cached until a create or delete."""
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def invalidate(self) -> None:
        """Forget the key order after a create or delete."""
        self._sorted = None


def guaranteed(attempt: Callable[[], T | None], what: str) -> T:
    """Run ``attempt`` until it answers; ``None`` from it is a write lost to a concurrent one.

    The server's ``GuaranteedUpdate``: a request without a resourceVersion precondition is
    retried on the fresh object, a bounded number of times.
    """
    for _ in range(_MAX_ATTEMPTS):
        result = attempt()
        if result is not None:
            return result
    raise errors.internal(f"too many concurrent writes to {what}")


def key_of(obj: JSON) -> Key:
    """``(namespace, name)`` of an object."""
    meta = objects.metadata(obj)
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Store:
    """All objects of all resources, with compare-and-swap writes."""

    def __init__(self, types: Iterable[ResourceType], history: int) -> None:
        self.lock = threading.Lock()
        self._rv = 0
        self._closed = False
        self.buckets = {t.key: Bucket(t, self.lock, history) for t in types}

    @property
    def rv(self) -> int:
        """The current (latest committed) resourceVersion."""
        with self.lock:
            return self._rv

    def _commit(self, bucket: Bucket, kind: str, entry: Entry, prev: Entry | None) -> None:
        bucket.events.append(Event(self._rv, kind, entry, prev))
        if len(bucket.events) > bucket.history:
            bucket.events.popleft()
            bucket.oldest = bucket.events[0].rv
        bucket.cond.notify_all()

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Entry | None:
        """Return the current version of one object."""
        with self.lock:
            return self.buckets[rtype.key].objects.get((namespace, name))

    def snapshot(self, rtype: ResourceType, namespace: str | None) -> tuple[list[Entry], int]:
        """Every object (of one namespace, if given) in key order, with the current rv."""
        with self.lock:
            bucket = self.buckets[rtype.key]
            keys = bucket.sorted_keys()
            if namespace:
                entries = [bucket.objects[k] for k in keys if k[0] == namespace]
            else:
                entries = [bucket.objects[k] for k in keys]
            return entries, self._rv

    def count(self, rtype: ResourceType, namespace: str) -> int:
        """How many objects of ``rtype`` live in ``namespace``."""
        with self.lock:
            return sum(1 for k in self.buckets[rtype.key].objects if k[0] == namespace)

    def create(self, rtype: ResourceType, obj: JSON, raws: Raws = EMPTY) -> Entry:
        """Store a new object (stamping its resourceVersion); 409 if the name is taken."""
        key = key_of(obj)
        with self.lock:
            bucket = self.buckets[rtype.key]
            if key in bucket.objects:
                raise errors.already_exists(rtype.group, rtype.plural, key[1])
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            entry = Entry(rtype, obj, raws)
            bucket.objects[key] = entry
            bucket.invalidate()
            self._commit(bucket, "ADDED", entry, None)
            return entry

    def replace(
        self, rtype: ResourceType, obj: JSON, expected_rv: int, *, remove: bool, raws: Raws = EMPTY
    ) -> Entry | None:
        """Swap in a new version if the stored one is still at ``expected_rv``, else ``None``.

        With ``remove`` the object is deleted instead (its last finalizer went while it was being
        deleted): watchers see only the DELETED event, carrying this final state.
        """

        def stamped(_: Entry, rv: int) -> Entry:
            obj["metadata"]["resourceVersion"] = str(rv)
            return Entry(rtype, obj, raws)

        return self._swap(rtype, key_of(obj), expected_rv, stamped, remove=remove)

    def delete(self, rtype: ResourceType, key: Key, expected_rv: int) -> Entry | None:
        """Remove an object still at ``expected_rv``; return its last state (at the new rv)."""
        return self._swap(rtype, key, expected_rv, functools.partial(with_rv, rtype), remove=True)

    def _swap(
        self,
        rtype: ResourceType,
        key: Key,
        expected_rv: int,
        successor: Callable[[Entry, int], Entry],
        *,
        remove: bool,
    ) -> Entry | None:
        """Commit ``successor(current, new rv)`` if the object is still at ``expected_rv``.

        ``None`` when it moved on (a lost race); a vanished object is a 404. With ``remove``
        the successor is the object's last state, and the object goes.
        """
        with self.lock:
            bucket = self.buckets[rtype.key]
            current = bucket.objects.get(key)
            if current is None:
                raise rtype.not_found(key[1])
            if current.rv != expected_rv:
                return None
            self._rv += 1
            entry = successor(current, self._rv)
            if remove:
                del bucket.objects[key]
                bucket.invalidate()
                self._commit(bucket, "DELETED", entry, current)
            else:
                bucket.objects[key] = entry
                self._commit(bucket, "MODIFIED", entry, current)
            return entry

    def events_after(
        self, rtype: ResourceType, cursor: int, wait: float
    ) -> tuple[list[Event], int]:
        """Events of ``rtype`` newer than ``cursor`` (waiting up to ``wait`` s for one) and the rv.

        Raises 410 Expired when events after ``cursor`` are no longer retained.
        """
        with self.lock:
            bucket = self.buckets[rtype.key]
            found = self._after(bucket, cursor)
            if not found and wait > 0 and not self._closed:
                bucket.cond.wait(wait)
                found = self._after(bucket, cursor)
            return found, self._rv

    def check_expired(self, rtype: ResourceType, rv: int) -> None:
        """Raise 410 Expired if a watch from ``rv`` cannot be served."""
        with self.lock:
            self._after(self.buckets[rtype.key], rv)

    @staticmethod
    def _after(bucket: Bucket, cursor: int) -> list[Event]:
        if cursor < bucket.oldest - 1:
            raise errors.expired(f"too old resource version: {cursor} ({bucket.oldest - 1})")
        found: list[Event] = []
        for event in reversed(bucket.events):
            if event.rv <= cursor:
                break
            found.append(event)
        found.reverse()
        return found

    def compact(self) -> None:
        """Forget all history: a watch from any resourceVersion before now gets 410."""
        with self.lock:
            for bucket in self.buckets.values():
                bucket.events.clear()
                bucket.oldest = self._rv + 1
                bucket.cond.notify_all()

    def close(self) -> None:
        """Wake every watcher so it can notice the server is stopping."""
        with self.lock:
            self._closed = True
            for bucket in self.buckets.values():
                bucket.cond.notify_all()
