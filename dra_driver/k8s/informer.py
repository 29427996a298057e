"""List-and-watch of one resource into a local cache of raw objects.

Why not ``kubernetes.informer.SharedInformer``: it deserializes into models (which needs a
``return_type`` workaround for ResourceClaims), and its ``stop()`` waits for the next event, so
a quiet watch never ends. This informer keeps raw JSON objects, stops promptly by shutting the
HTTP response down, resumes a broken watch from the last resourceVersion and relists (firing
the differences as events) when the API server says that version is gone.

A watch is bounded twice: the API server ends it after ``timeoutSeconds``, and the client
gives up on one that stays silent longer than that (its connection died without closing).
Either way it is renewed from the last resourceVersion. The loop beats a heartbeat at every
step, so a watchdog can tell a quiet watch from a stuck one.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, Protocol

from dra_driver.k8s import objects
from dra_driver.k8s.client import client_of, forget_connections, timeouts_of
from dra_driver.k8s.errors import (
    ApiError,
    GoneError,
    NotFoundError,
    from_exception,
    translate_errors,
)
from dra_driver.k8s.objects import Object
from dra_driver.k8s.settings import ApiTimeouts
from dra_driver.logging import carry, get_logger
from dra_driver.metrics.watchdog import Heartbeat, stall_reason

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Handler = Callable[[EventType, Object], None]
ObjectKey = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""

log = get_logger(__name__)

PAGE_SIZE: Final = 100
"""Objects per LIST page. A page is held whole while it is decoded and transformed, a decoded
page of real pods (managedFields, status, env) takes several times its JSON as Python objects,
and what the allocator frees stays with the process: over 20,000 pods the controller ends
7 MB larger with pages of 500 (hack/bench/realmemory.py)."""
_INITIAL_BACKOFF_SECONDS: Final = 0.1
_MAX_BACKOFF_SECONDS: Final = 10.0
_STOP_SECONDS: Final = 5.0
UNSERVED_RETRY_SECONDS: Final = 60.0
"""How often an optional informer asks again for a resource the API server does not serve."""


class _Response(Protocol):
    data: bytes

    def stream(self, amt: int | None = ..., decode_content: bool | None = ...) -> Iterator[bytes]:
        """Yield body chunks as they arrive."""

    def shutdown(self) -> None:
        """Unblock a read in progress in another thread."""

    def release_conn(self) -> None:
        """Return the connection to the pool."""


def object_key(obj: Object) -> ObjectKey:
    """Return the cache key of a raw object."""
    return objects.namespace(obj), objects.name(obj)


def _lines(response: _Response) -> Iterator[bytes]:
    pending = b""
    for chunk in response.stream(None, decode_content=False):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending


class Informer:
    """Keeps a local copy of every object of one resource (optionally filtered) up to date.

    ``list_func`` is a generated list method such as ``CoreV1Api.list_pod_for_all_namespaces``
    or ``ResourceV1Api.list_resource_slice``; ``handler`` is called on the informer's thread
    for every change, after the cache reflects it, so it must be quick and must not raise
    (exceptions are logged and swallowed to keep the watch alive). ``timeouts`` default to
    those of the API client behind ``list_func``. ``optional``: a resource the API server may
    not serve (a feature gate off, an older release); while it answers 404 the cache is empty
    and synced, and the list is tried again every :data:`UNSERVED_RETRY_SECONDS`.
    """

    def __init__(
        self,
        list_func: Callable[..., Any],
        *,
        name: str,
        handler: Handler | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeouts: ApiTimeouts | None = None,
        clock: Callable[[], float] = time.monotonic,
        transform: Callable[[Object], Object] | None = None,
        page_size: int = PAGE_SIZE,
        optional: bool = False,
    ) -> None:
        self._list_func = list_func
        self._optional = optional
        self._transform = transform
        self._page_size = page_size
        self._api_client = client_of(list_func)
        self._timeouts = timeouts or timeouts_of(self._api_client)
        self.name = f"informer-{name}"
        self._name = name
        self._handlers: list[Handler] = [handler] if handler is not None else []
        self._selectors = {
            key: value
            for key, value in (
                ("label_selector", label_selector),
                ("field_selector", field_selector),
            )
            if value
        }
        self._cache: dict[ObjectKey, Object] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._response: _Response | None = None
        self._thread: threading.Thread | None = None
        self._heartbeat = Heartbeat(clock)
        self._clock = clock
        self.resource_version = ""

    # -- reading the cache ---------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Object | None:
        """Return the cached object, or ``None``; the caller must not mutate it."""
        with self._lock:
            return self._cache.get((namespace, name))

    def list(self) -> list[Object]:
        """Return every cached object; the caller must not mutate them."""
        with self._lock:
            return list(self._cache.values())

    def add_handler(self, handler: Handler) -> None:
        """Also call ``handler`` for every change, after those given before; before start.

        For a second reader of the same cache in one process (the webhook the controller
        hosts), which then needs no watch of its own.
        """
        if self._thread is not None:
            raise RuntimeError(f"{self.name}: handlers are added before the informer starts")
        self._handlers.append(handler)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until the first list has been loaded; return whether it was."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        """Whether the cache holds a complete list (readiness of whoever depends on it)."""
        return self._synced.is_set()

    # -- the watchdog's view -------------------------------------------------------------

    def silent_seconds(self) -> float:
        """Seconds since the informer last received, connected or retried."""
        return self._heartbeat.read()[0]

    def stalled(self) -> str | None:
        """Why the informer counts as stuck (no event, bookmark or retry in time), or ``None``."""
        thread = self._thread
        if thread is None or self._stopping.is_set():
            return None
        if not thread.is_alive():
            return "its thread ended"
        silent, doing = self._heartbeat.read()
        return stall_reason(silent, self._timeouts.watch_stall_limit, doing or "watching")

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start listing and watching in a daemon thread."""
        self._heartbeat.beat("starting")
        self._thread = threading.Thread(target=carry(self._run), name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = _STOP_SECONDS) -> None:
        """Stop watching and join the thread; returns promptly even on a quiet watch.

        A request still waiting for the API server's first byte cannot be interrupted: after
        ``timeout`` the daemon thread is left to end at its own timeout, and stopping goes on.
        """
        self.request_stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("informer.stop_timeout", informer=self._name, waited=timeout)

    def request_stop(self) -> None:
        """Tell the thread to stop and interrupt its watch, without waiting for it."""
        self._stopping.set()
        response = self._response
        if response is not None:
            # The watch may end on its own meanwhile (its socket closed, or released to the
            # pool); then there is nothing left to interrupt.
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                response.shutdown()

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = _INITIAL_BACKOFF_SECONDS
        while not self._stopping.is_set():
            try:
                if not self.resource_version:
                    self._heartbeat.beat("listing")
                    self._relist()
                self._heartbeat.beat("watching")
                self._watch()
                backoff = _INITIAL_BACKOFF_SECONDS
            except GoneError:
                log.info("informer.relist", informer=self._name, reason="resource version gone")
                self.resource_version = ""
            except Exception as exc:  # the watch must outlive any one failure
                if self._stopping.is_set():
                    break
                if self._optional and isinstance(exc, NotFoundError):
                    self.resource_version = ""
                    self._unserved(exc)
                    continue
                if isinstance(exc, ApiError):
                    if exc.reason == "Timeout":
                        # Connections opened before this one may be just as dead.
                        forget_connections(self._api_client)
                    log.warning(
                        "informer.retry", informer=self._name, error=str(exc), backoff=backoff
                    )
                else:
                    log.exception("informer.failed", informer=self._name, backoff=backoff)
                self._heartbeat.beat("waiting to retry")
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)

    def _unserved(self, exc: NotFoundError) -> None:
        """Hold an empty, synced cache while the resource is not served; then list again."""
        if not self._synced.is_set() or self._cache:
            log.info("informer.not_served", informer=self._name, error=str(exc))
        with self._lock:
            old, self._cache = self._cache, {}
        for obj in old.values():
            self._notify("DELETED", obj)
        self._synced.set()
        deadline = self._clock() + UNSERVED_RETRY_SECONDS
        # In short waits that beat the heartbeat: a watchdog must not take this for a stall.
        while not self._stopping.is_set() and self._clock() < deadline:
            self._heartbeat.beat("waiting for the resource to be served")
            self._stopping.wait(1.0)

    def _call(self, **kwargs: Any) -> _Response:  # noqa: ANN401 - generated client kwargs
        with translate_errors():
            response: _Response = self._list_func(
                **self._selectors, **kwargs, _preload_content=False
            )
        return response

    def _page(self, token: str, into: dict[ObjectKey, Object]) -> tuple[str, str]:
        """Read the LIST page after ``token`` into ``into``; return the next token and version.

        The page's body goes with the return, before the next page is read: two decoded pages
        alive at once left the controller 25 MB larger over 20,000 pods.
        """
        page = {"_continue": token} if token else {}
        response = self._call(limit=self._page_size, **page)
        with translate_errors():
            body = json.loads(response.data)
        for item in body.get("items") or []:
            kept = self._transform(item) if self._transform is not None else item
            into[object_key(kept)] = kept
        metadata = objects.metadata(body)
        return str(metadata.get("continue") or ""), str(metadata.get("resourceVersion") or "")

    def _relist(self) -> None:
        # In pages: the API server serves them from one consistent snapshot, and an expired
        # continue token is a 410 that starts the relist over (GoneError in _run).
        fresh: dict[ObjectKey, Object] = {}
        token = ""
        while True:
            token, version = self._page(token, fresh)
            if not token:
                break
            self._heartbeat.beat("listing")
        with self._lock:
            old = self._cache
            self._cache = fresh
        # Tell the handler what changed while we were not watching, as the watch would have.
        for key, obj in old.items():
            if key not in fresh:
                self._notify("DELETED", obj)
        for key, obj in fresh.items():
            previous = old.get(key)
            if previous is None:
                self._notify("ADDED", obj)
            elif previous != obj:  # a transform may drop the resourceVersion: compare all
                self._notify("MODIFIED", obj)
        self.resource_version = version
        self._synced.set()

    def _watch(self) -> None:
        timeouts = self._timeouts
        response = self._call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeouts.watch,
            _request_timeout=timeouts.per_watch,
        )
        self._response = response
        try:
            # stop() may have looked for a response to shut down just before it was set.
            if self._stopping.is_set():
                return
            with translate_errors():
                for line in _lines(response):
                    self._heartbeat.beat("watching")
                    if self._stopping.is_set():
                        return
                    self._apply(json.loads(line))
        except ApiError:
            if not self._stopping.is_set():
                raise
        finally:
            self._response = None
            response.release_conn()

    def _apply(self, event: Object) -> None:
        kind = event.get("type")
        obj: Object = event.get("object") or {}
        if kind == "ERROR":
            raise from_exception(_WatchEventError(obj))
        version = str(obj.get("metadata", {}).get("resourceVersion") or "")
        if kind == "BOOKMARK":
            self.resource_version = version or self.resource_version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        key = object_key(obj)
        if self._transform is not None:
            obj = self._transform(obj)
            # A change only to fields the transform drops (a node's heartbeat, a pod's
            # container statuses) is no change to what the component reads: not handed on.
            if kind == "MODIFIED" and self._cache.get(key) == obj:
                self.resource_version = version or self.resource_version
                return
        with self._lock:
            if kind == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
        self._notify(kind, obj)
        # Only after the handler: a reader that sees resource_version at or past a write knows
        # every change up to that write has been handed on (ClusterView.has_seen relies on it).
        self.resource_version = version or self.resource_version

    def _notify(self, kind: EventType, obj: Object) -> None:
        for handler in self._handlers:
            try:
                handler(kind, obj)
            except Exception:
                log.exception("informer.handler_failed", informer=self._name, event_type=kind)


class _WatchEventError(Exception):
    """An ERROR watch event, shaped like a client exception so it maps to our hierarchy."""

    def __init__(self, status: Object) -> None:
        super().__init__(status.get("message", ""))
        self.status = int(status.get("code") or 500)
        self.reason = status.get("reason")
        self.body = json.dumps(status)
        self.headers = None
