"""Kubernetes timestamps (RFC 3339, UTC, whole seconds), as the API's ``Time`` fields carry."""

from __future__ import annotations

import datetime


def rfc3339(moment: datetime.datetime | None = None) -> str:
    """Format ``moment`` (default: now) the way the API server writes ``metav1.Time``."""
    moment = moment or datetime.datetime.now(datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_seconds(timestamp: str) -> float:
    """Return an API ``Time`` (``2026-11-28T10:00:00Z``) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
