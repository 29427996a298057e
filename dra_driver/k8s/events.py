"""Kubernetes Events about pods and claims, so `kubectl describe` explains every decision."""

from __future__ import annotations

import contextlib
import queue
import secrets
import threading
from typing import Any, Final, Literal, Protocol

from kubernetes import client

from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import ApiError
from dra_driver.k8s.timestamps import rfc3339
from dra_driver.logging import carry, get_logger

EventType = Literal["Normal", "Warning"]

log = get_logger(__name__)

# The API server refuses longer event messages.
_MAX_MESSAGE: Final = 1024
# Events waiting to be sent before new ones are dropped: minutes of allocations at full speed.
_QUEUED: Final = 10_000
# How long stopping waits for the queued events to go out.
_FLUSH_SECONDS: Final = 2.0


class EventSink(Protocol):
    """Anything that records events: :class:`EventRecorder` or :class:`EventSender`."""

    def record(self, obj: dict[str, Any], event_type: EventType, reason: str, message: str) -> None:
        """Attach an event to ``obj``."""


class EventRecorder:
    """Writes core/v1 Events on behalf of one component; failures are logged, never raised.

    An event is a courtesy to the operator: losing one must never fail the work it describes.
    """

    def __init__(self, api_client: client.ApiClient, component: str) -> None:
        self._core = client.CoreV1Api(api_client)
        self._component = component

    def record(self, obj: dict[str, Any], event_type: EventType, reason: str, message: str) -> None:
        """Attach an event to ``obj`` (a raw object with apiVersion, kind and metadata)."""
        self.send(self.build(obj, event_type, reason, message))

    def build(
        self, obj: dict[str, Any], event_type: EventType, reason: str, message: str
    ) -> dict[str, Any]:
        """Return the Event about ``obj``, stamped now."""
        metadata = objects.metadata(obj)
        now = rfc3339()
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata.get('name', 'object')}.{secrets.token_hex(8)}",
                "namespace": metadata.get("namespace") or "default",
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": metadata.get("name"),
                "namespace": metadata.get("namespace"),
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

    def send(self, event: dict[str, Any]) -> None:
        """Create a built Event; a failure is logged and the event dropped."""
        try:
            raw.call(self._core.create_namespaced_event, event["metadata"]["namespace"], event)
        except ApiError as exc:
            log.warning("event.dropped", reason=event["reason"], error=str(exc))


class EventSender:
    """Sends a recorder's events from a thread of its own, so recording never waits.

    Written inline, an event would be one more API round trip on the path of the pod it is
    about. The queue is bounded: when the API server cannot keep up, new events are dropped
    and logged rather than held in memory without end.
    """

    def __init__(self, recorder: EventRecorder, capacity: int = _QUEUED) -> None:
        self._recorder = recorder
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(capacity)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start sending."""
        self._thread = threading.Thread(target=carry(self._run), name="events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = _FLUSH_SECONDS) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then stop."""
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
        self._thread = None

    def record(self, obj: dict[str, Any], event_type: EventType, reason: str, message: str) -> None:
        """Queue an event about ``obj``, stamped now."""
        try:
            self._queue.put_nowait(self._recorder.build(obj, event_type, reason, message))
        except queue.Full:
            log.warning("event.dropped", reason=reason, error="too many events waiting to be sent")

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            self._recorder.send(event)
