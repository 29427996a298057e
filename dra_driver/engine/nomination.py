"""A nomination: a card's room held for an online claim while offline pods are evicted from it.

The controller writes it as an annotation on each claim of the online pod before it evicts
anyone, so the hold outlives the controller: a replica that starts (or takes over) after the
evictions reads the annotation back and counts the room as taken, exactly as the one that
wrote it did. The annotation says which pod the room is for, until when, whom it evicts, and
the claim's planned results (devices and consumed amounts) that are counted as held.

Anyone who may update claims can write an annotation, so a malformed one is ignored (the
claim is counted as unallocated), never trusted: :func:`parse_nomination` checks every field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.k8s.timestamps import epoch_seconds


class NominationError(ValueError):
    """The annotation is not a nomination this controller wrote; the message says why."""


@dataclasses.dataclass(frozen=True)
class PodRef:
    """A pod by namespace, name and UID (the UID tells a re-created pod apart)."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        """``namespace/name``, as events and logs name a pod."""
        return f"{self.namespace}/{self.name}"

    def document(self) -> dict[str, str]:
        """Return the JSON object the annotation stores."""
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid}


@dataclasses.dataclass(frozen=True)
class Nomination:
    """Room on ``node`` held for ``pod`` until ``expires`` while ``victims`` are evicted."""

    pod: PodRef
    node: str
    expires: str
    """RFC 3339; past it, the hold is dropped and the pod competes like any other."""
    victims: tuple[PodRef, ...]
    results: tuple[Object, ...]
    """The claim's planned allocation results, counted as held (shareID, consumedCapacity)."""

    def expired(self, now: float) -> bool:
        """Whether the hold has run out at ``now`` (seconds since the epoch)."""
        return epoch_seconds(self.expires) <= now

    def encode(self) -> str:
        """Return the annotation's value: compact JSON, keys sorted."""
        document = {
            "pod": self.pod.document(),
            "node": self.node,
            "expires": self.expires,
            "victims": [victim.document() for victim in self.victims],
            "results": list(self.results),
        }
        return json.dumps(document, separators=(",", ":"), sort_keys=True)

    def held_claim(self, claim: Object) -> Object:
        """Return ``claim`` as the hold is counted: allocated to the planned results."""
        allocation = {"devices": {"results": list(self.results)}}
        return {**claim, "status": {**objects.status(claim), "allocation": allocation}}


def nomination_of(claim: Object, annotation: str) -> Nomination | None:
    """Return the claim's nomination, ``None`` without one; raise :class:`NominationError`."""
    text = (objects.metadata(claim).get("annotations") or {}).get(annotation)
    if text is None:
        return None
    return parse_nomination(text)


def parse_nomination(text: object) -> Nomination:
    """Read an annotation's value; raise :class:`NominationError` naming the bad field."""
    if not isinstance(text, str):
        raise NominationError("the annotation is not a string")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise NominationError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise NominationError("not a JSON object")
    expires = _text(document, "expires")
    try:
        epoch_seconds(expires)
    except ValueError:
        raise NominationError(f"expires: {expires!r} is not an RFC 3339 time") from None
    victims = document.get("victims")
    results = document.get("results")
    if not isinstance(victims, list):
        raise NominationError("victims: not a list")
    if not isinstance(results, list) or not results:
        raise NominationError("results: not a non-empty list")
    return Nomination(
        pod=_pod(document.get("pod"), "pod"),
        node=_text(document, "node"),
        expires=expires,
        victims=tuple(_pod(v, f"victims[{i}]") for i, v in enumerate(victims)),
        results=tuple(_result(r, f"results[{i}]") for i, r in enumerate(results)),
    )


def _text(document: Mapping[str, Any], field: str, where: str = "") -> str:
    value = document.get(field)
    if not isinstance(value, str) or not value:
        raise NominationError(f"{where}{field}: not a non-empty string")
    return value


def _pod(value: object, where: str) -> PodRef:
    if not isinstance(value, dict):
        raise NominationError(f"{where}: not an object")
    namespace, name, uid = (_text(value, f, f"{where}.") for f in ("namespace", "name", "uid"))
    return PodRef(namespace, name, uid)


def _result(value: object, where: str) -> Object:
    if not isinstance(value, dict):
        raise NominationError(f"{where}: not an object")
    for field in ("driver", "pool", "device"):
        _text(value, field, f"{where}.")
    consumed = value.get("consumedCapacity", {})
    share = value.get("shareID")
    if not isinstance(consumed, dict) or not all(isinstance(v, str) for v in consumed.values()):
        raise NominationError(f"{where}.consumedCapacity: not an object of quantities")
    if share is not None and not isinstance(share, str):
        raise NominationError(f"{where}.shareID: not a string")
    return value
