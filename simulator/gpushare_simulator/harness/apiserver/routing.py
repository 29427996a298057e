"""Request routing: URL path and method to (verb, resource, namespace, name, subresource)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.resources import BINDINGS, Registry, ResourceType

NAMED_CREATES: Final = frozenset({"binding", "eviction"})
"""Subresources created by a POST to an object's own path (``pods/<name>/eviction``)."""
SUBRESOURCE_VERBS: Final = {
    "binding": frozenset({"create"}),
    "eviction": frozenset({"create"}),
    "status": frozenset({"get", "update", "patch"}),
}
DISCOVERY_PATHS: Final = frozenset(
    {"/version", "/api", "/apis", "/healthz", "/livez", "/readyz", "/openapi/v2", "/openapi/v3"}
)


@dataclass(frozen=True)
class RequestInfo:
    """What a request is about; ``resource`` is ``pods``, ``resourceclaims/status`` and so on."""

    method: str
    path: str
    query: dict[str, str]
    verb: str
    rtype: ResourceType | None = None
    namespace: str | None = None
    name: str = ""
    subresource: str = ""

    @property
    def resource(self) -> str:
        """``plural`` or ``plural/subresource`` (``""`` for discovery and unknown paths)."""
        if self.rtype is None:
            return ""
        return f"{self.rtype.plural}/{self.subresource}" if self.subresource else self.rtype.plural


def _group_version(parts: list[str]) -> tuple[str, str, list[str]] | None:
    if len(parts) >= 2 and parts[0] == "api":  # noqa: PLR2004
        return "", parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":  # noqa: PLR2004
        return parts[1], parts[2], parts[3:]
    return None


def _verb(method: str, name: str, subresource: str, watch: bool) -> str:
    if method in {"GET", "HEAD"}:
        if watch:
            return "watch"
        return "get" if name else "list"
    table = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }
    verb = table.get(method)
    if verb is None or (verb in {"update", "patch"} and not name):
        raise errors.method_not_allowed()
    if verb == "create" and name and subresource not in NAMED_CREATES:
        raise errors.method_not_allowed()
    return verb


def route(registry: Registry, method: str, target: str) -> RequestInfo:
    """Resolve a request target; unknown paths are 404, unsupported verbs 405."""
    split = urlsplit(target)
    query = dict(parse_qsl(split.query, keep_blank_values=True))
    path = split.path.rstrip("/") or "/"
    parts = [p for p in path.split("/") if p]
    found = _group_version(parts)
    if path in DISCOVERY_PATHS or found is None or not found[2]:
        return RequestInfo(method, path, query, "discovery")
    group, version, rest = found
    watch = query.get("watch") in {"true", "1"}
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespace = None
    served = {t.plural for t in registry.in_group_version(group, version) if t.namespaced}
    if group == "" and version == "v1":
        served.add(BINDINGS.plural)
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in served:  # noqa: PLR2004
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:  # noqa: PLR2004
        raise errors.path_not_found()
    plural, name = rest[0], rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""  # noqa: PLR2004
    rtype = (
        BINDINGS if (group, plural) == ("", "bindings") else registry.lookup(group, version, plural)
    )
    if rtype is None or (rtype.namespaced and name and namespace is None):
        raise errors.path_not_found()
    if not rtype.namespaced and namespace is not None:
        raise errors.path_not_found()
    if subresource and subresource not in rtype.subresources:
        raise errors.path_not_found()
    if watch and name:  # the legacy /watch/.../<name> form watches one object
        query = {**query, "fieldSelector": _join(query.get("fieldSelector", ""), name)}
        name = ""
    verb = _verb(method, name, subresource, watch)
    allowed = SUBRESOURCE_VERBS.get(subresource)
    if (rtype is BINDINGS and verb != "create") or (allowed is not None and verb not in allowed):
        raise errors.method_not_allowed()
    if verb == "deletecollection" and "deletecollection" not in rtype.verbs:
        raise errors.method_not_allowed()
    return RequestInfo(method, path, query, verb, rtype, namespace, name, subresource)


def _join(selector: str, name: str) -> str:
    term = f"metadata.name={name}"
    return f"{selector},{term}" if selector else term
