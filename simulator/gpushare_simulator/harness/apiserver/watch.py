"""WATCH streaming with the watch cache's semantics.

* no ``resourceVersion`` (or ``"0"``): synthetic ADDED events for the current objects, then changes;
* a ``resourceVersion`` older than the retained history: one ERROR event carrying a 410
  ``Expired`` Status (``too old resource version: X (Y)``), then the stream ends;
* selectors: an object that stops matching is sent as DELETED (its previous state, at the new
  resourceVersion), one that starts matching as ADDED;
* ``allowWatchBookmarks``: BOOKMARK events every ``bookmark_interval`` seconds and before the
  timeout; ``sendInitialEvents=true`` ends the initial ADDED burst with a BOOKMARK annotated
  ``k8s.io/initial-events-end: "true"``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.reads import ListOptions
from gpushare_simulator.harness.apiserver.resources import ResourceType
from gpushare_simulator.harness.apiserver.store import Entry, Event, Store, watch_line, with_rv

DEFAULT_TIMEOUT: Final = 1800.0
_LIVENESS_CHECK: Final = 0.5


@dataclass(frozen=True)
class WatchRequest:
    """A parsed watch request."""

    rtype: ResourceType
    namespace: str | None
    options: ListOptions
    timeout: float
    bookmarks: bool
    send_initial: bool | None

    @classmethod
    def parse(
        cls, rtype: ResourceType, namespace: str | None, query: Mapping[str, str]
    ) -> WatchRequest:
        """Read ``timeoutSeconds``, ``allowWatchBookmarks`` and ``sendInitialEvents``."""
        try:
            timeout = float(query.get("timeoutSeconds") or DEFAULT_TIMEOUT)
        except ValueError:
            raise errors.bad_request("timeoutSeconds must be an integer") from None
        initial = query.get("sendInitialEvents")
        return cls(
            rtype=rtype,
            namespace=namespace,
            options=ListOptions.parse(rtype, query),
            timeout=max(0.0, timeout),
            bookmarks=query.get("allowWatchBookmarks") in {"true", "1"},
            send_initial=None if initial is None else initial in {"true", "1"},
        )


def bookmark(rtype: ResourceType, rv: int, *, initial_end: bool = False) -> bytes:
    """Return a BOOKMARK event line."""
    meta: dict[str, object] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta}
    return watch_line("BOOKMARK", json.dumps(obj, separators=(",", ":")).encode())


def error_line(error: errors.ApiError) -> bytes:
    """Return an ERROR event line carrying a Status."""
    return watch_line("ERROR", json.dumps(error.status(), separators=(",", ":")).encode())


class WatchStream:
    """Serves one watch; :meth:`run` writes event lines until timeout, stop or disconnect."""

    def __init__(
        self,
        store: Store,
        request: WatchRequest,
        write: Callable[[bytes], None],
        *,
        stopping: threading.Event,
        client_gone: Callable[[], bool],
        bookmark_interval: float,
    ) -> None:
        self.store = store
        self.request = request
        self.write = write
        self.stopping = stopping
        self.client_gone = client_gone
        self.bookmark_interval = max(0.01, bookmark_interval)

    def _matches(self, entry: Entry) -> bool:
        namespace = self.request.namespace
        if namespace and entry.obj["metadata"].get("namespace") != namespace:
            return False
        return self.request.options.matches(entry)

    @property
    def _filtered(self) -> bool:
        return bool(self.request.namespace) or not self.request.options.selects_all

    def convert(self, event: Event) -> bytes | None:
        """Return the line this watcher sees for ``event`` (``None``: filtered out)."""
        if not self._filtered:
            return event.line
        if event.type == "DELETED":
            return event.line if self._matches(event.entry) else None
        now = self._matches(event.entry)
        before = event.prev is not None and self._matches(event.prev)
        if now and before:
            return event.line
        if now:
            return watch_line("ADDED", event.entry.full)
        if before and event.prev is not None:
            return watch_line("DELETED", with_rv(self.request.rtype, event.prev, event.rv).full)
        return None

    def _start(self) -> int:
        """Send the initial state if asked for; return the resourceVersion to continue from."""
        rv_text = self.request.options.resource_version
        initial = self.request.send_initial
        if initial is None:
            initial = rv_text in {"", "0"}
        if not initial:
            cursor = int(rv_text) if rv_text not in {"", "0"} else self.store.rv
            self.store.check_expired(self.request.rtype, cursor)
            return cursor
        entries, cursor = self.store.snapshot(self.request.rtype, self.request.namespace)
        for entry in entries:
            if self._matches(entry):
                self.write(watch_line("ADDED", entry.full))
        if self.request.send_initial and self.request.bookmarks:
            self.write(bookmark(self.request.rtype, cursor, initial_end=True))
        return cursor

    def run(self) -> None:
        """Stream events; errors end the stream with an ERROR event, disconnects silently."""
        try:
            self._run()
        except errors.ApiError as exc:
            try:
                self.write(error_line(exc))
            except OSError:
                return
        except OSError:
            return

    def _run(self) -> None:
        rtype = self.request.rtype
        deadline = time.monotonic() + self.request.timeout
        cursor = self._start()
        last_bookmark = last_check = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            wait = min(deadline - now, _LIVENESS_CHECK)
            if self.request.bookmarks:
                wait = min(wait, max(0.0, last_bookmark + self.bookmark_interval - now))
            events, store_rv = self.store.events_after(rtype, cursor, wait)
            for event in events:
                line = self.convert(event)
                if line is not None:
                    self.write(line)
                cursor = event.rv
            now = time.monotonic()
            if not events:
                cursor = max(cursor, store_rv)  # nothing of ours in (cursor, store_rv]
                due = now - last_bookmark >= self.bookmark_interval or deadline - now < 0.05  # noqa: PLR2004
                if self.request.bookmarks and due:
                    self.write(bookmark(rtype, cursor))
                    last_bookmark = now
            if now - last_check >= _LIVENESS_CHECK:
                last_check = now
                if self.client_gone():
                    return
