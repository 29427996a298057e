"""GET and LIST: list serialization from cached object bytes, selectors and pagination."""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.resources import ResourceType
from gpushare_simulator.harness.apiserver.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)
from gpushare_simulator.harness.apiserver.store import Entry, Store, key_of

_CONTINUE_VERSION: Final = "meta.k8s.io/v1"


@dataclass(frozen=True)
class ListOptions:
    """The query parameters of a list or watch."""

    labels: LabelSelector = field(default_factory=LabelSelector)
    fields: FieldSelector = field(default_factory=FieldSelector)
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""

    @classmethod
    def parse(cls, rtype: ResourceType, query: Mapping[str, str]) -> ListOptions:
        """Parse the selectors, ``limit``, ``continue`` and ``resourceVersion`` of a query."""
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise errors.bad_request(f"limit: invalid value {query.get('limit')!r}") from None
        rv = query.get("resourceVersion", "")
        if rv and not rv.isdigit():
            raise errors.bad_request(f'invalid resource version: "{rv}"')
        return cls(
            labels=parse_label_selector(query.get("labelSelector", "")),
            fields=parse_field_selector(query.get("fieldSelector", ""), rtype),
            limit=max(0, limit),
            continue_token=query.get("continue", ""),
            resource_version=rv,
        )

    def matches(self, entry: Entry) -> bool:
        """Whether an object passes both selectors."""
        return self.labels.matches(entry.obj) and self.fields.matches(entry.obj)

    @property
    def selects_all(self) -> bool:
        """Whether no selector is set."""
        return not self.labels.requirements and not self.fields.requirements


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    start = f"{key[0]}/{key[1]}\x00" if key[0] else f"{key[1]}\x00"
    raw = json.dumps({"v": _CONTINUE_VERSION, "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded))
        start = str(data["start"]).rstrip("\x00")
        rv = int(data["rv"])
        version = data.get("v")
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None
    if version != _CONTINUE_VERSION:
        raise errors.bad_request(f"continue key is not valid: unknown version {version!r}")
    namespace, _, name = start.rpartition("/")
    return rv, (namespace, name)


def get_object(store: Store, rtype: ResourceType, namespace: str, name: str) -> Entry:
    """GET one object; 404 NotFound like the server's."""
    entry = store.get(rtype, namespace, name)
    if entry is None:
        raise rtype.not_found(name)
    return entry


def list_objects(
    store: Store, rtype: ResourceType, namespace: str | None, options: ListOptions
) -> tuple[list[Entry], int, str, int | None]:
    """LIST: ``(items, resourceVersion, continue token, remainingItemCount)``."""
    entries, rv = store.snapshot(rtype, namespace)
    if options.continue_token:
        rv, start = _decode_continue(options.continue_token)
        # A key per probe, not per entry: a relist in pages would otherwise cost pages x items.
        entries = entries[bisect.bisect_right(entries, start, key=lambda e: key_of(e.obj)) :]
    matching = entries if options.selects_all else [e for e in entries if options.matches(e)]
    if not options.limit or len(matching) <= options.limit:
        return matching, rv, "", None
    page = matching[: options.limit]
    remaining = len(matching) - options.limit if options.selects_all else None
    return page, rv, _encode_continue(rv, key_of(page[-1].obj)), remaining


def list_body(
    rtype: ResourceType, items: list[Entry], rv: int, token: str, remaining: int | None
) -> bytes:
    """Serialize a list from the cached bytes of its items."""
    meta: dict[str, object] = {"resourceVersion": str(rv)}
    if token:
        meta["continue"] = token
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    head = json.dumps(
        {"kind": rtype.list_kind, "apiVersion": rtype.api_version, "metadata": meta},
        separators=(",", ":"),
    ).encode()
    return head[:-1] + b',"items":[' + b",".join(entry.item for entry in items) + b"]}"
