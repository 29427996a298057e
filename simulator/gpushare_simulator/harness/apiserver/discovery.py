"""Discovery documents: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<g>[/<v>]``."""

from __future__ import annotations

from typing import Any, Final

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.resources import (
    ADMISSION,
    BINDINGS,
    POLICY,
    Registry,
    ResourceType,
)

JSON = dict[str, Any]
_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "eviction": ["create"],
}
# Subresources whose objects are of another kind, as discovery names them (an Eviction is
# policy/v1, not core).
_SUBRESOURCE_KINDS: Final = {
    "binding": {"kind": "Binding"},
    "eviction": {"group": POLICY, "version": "v1", "kind": "Eviction"},
}


def version_info(kube_version: str) -> JSON:
    """Return the ``/version`` document of the emulated release."""
    major, minor = kube_version.split(".")
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "gitVersion": f"v{kube_version}.0",
        "gitCommit": "0" * 40,
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _resource(rtype: ResourceType) -> list[JSON]:
    entry: JSON = {
        "name": rtype.plural,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": list(rtype.verbs),
    }
    if rtype.short_names:
        entry["shortNames"] = list(rtype.short_names)
    if rtype.plural == "pods":
        entry["categories"] = ["all"]
    elif rtype.group == ADMISSION:
        entry["categories"] = ["api-extensions"]
    entries = [entry]
    for sub in sorted(rtype.subresources):
        entries.append(
            {
                "name": f"{rtype.plural}/{sub}",
                "singularName": "",
                "namespaced": rtype.namespaced,
                **_SUBRESOURCE_KINDS.get(sub, {"kind": rtype.kind}),
                "verbs": _SUBRESOURCE_VERBS[sub],
            }
        )
    return entries


def _group_entry(group: str, versions: list[str]) -> JSON:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def discovery(registry: Registry, path: str, kube_version: str, address: str) -> JSON | str:
    """Return the document served at ``path``; 404 for paths that are not discovery."""
    if path in {"/healthz", "/livez", "/readyz"}:
        return "ok"
    if path == "/version":
        return version_info(kube_version)
    groups: dict[str, list[str]] = {}
    for group, version in registry.group_versions():
        groups.setdefault(group, []).append(version)
    parts = [p for p in path.split("/") if p]
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": groups.get("", []),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        }
    if parts == ["apis"]:
        named = [_group_entry(g, v) for g, v in groups.items() if g]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": named}
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:  # noqa: PLR2004
        return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(parts[1], groups[parts[1]])}
    if parts[:1] == ["api"] and len(parts) == 2 and parts[1] in groups.get("", []):  # noqa: PLR2004
        group, version = "", parts[1]
    elif parts[:1] == ["apis"] and len(parts) == 3 and parts[2] in groups.get(parts[1], []):  # noqa: PLR2004
        group, version = parts[1], parts[2]
    else:
        raise errors.path_not_found()
    types = registry.in_group_version(group, version)
    if group == "" and version == "v1":
        types = [*types, BINDINGS]
    resources = [entry for rtype in types for entry in _resource(rtype)]
    body: JSON = {"kind": "APIResourceList", "groupVersion": f"{group}/{version}".lstrip("/")}
    if group:
        body["apiVersion"] = "v1"
    body["resources"] = resources
    return body
