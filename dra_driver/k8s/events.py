"""Kubernetes Events about pods and claims, so `kubectl describe` explains every decision."""

from __future__ import annotations

import secrets
from typing import Any, Final, Literal

from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.errors import ApiError
from dra_driver.k8s.timestamps import rfc3339
from dra_driver.logging import get_logger

EventType = Literal["Normal", "Warning"]

log = get_logger(__name__)

# The API server refuses longer event messages.
_MAX_MESSAGE: Final = 1024


class EventRecorder:
    """Writes core/v1 Events on behalf of one component; failures are logged, never raised.

    An event is a courtesy to the operator: losing one must never fail the work it describes.
    """

    def __init__(self, api_client: client.ApiClient, component: str) -> None:
        self._core = client.CoreV1Api(api_client)
        self._component = component

    def record(self, obj: dict[str, Any], event_type: EventType, reason: str, message: str) -> None:
        """Attach an event to ``obj`` (a raw object with apiVersion, kind and metadata)."""
        metadata = obj.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        now = rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata.get('name', 'object')}.{secrets.token_hex(8)}",
                "namespace": namespace,
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
        try:
            raw.call(self._core.create_namespaced_event, namespace, body)
        except ApiError as exc:
            log.warning("event.dropped", reason=reason, error=str(exc))
