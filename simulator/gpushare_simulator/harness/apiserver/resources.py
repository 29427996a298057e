"""The resource types the fake API server serves, with their scope, kinds and selectable fields."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from dra_driver.api import DEFAULT_DRIVER_NAME
from gpushare_simulator.harness.apiserver import errors

_META_FIELDS: Final = MappingProxyType(
    {"metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace"}
)
_DEFAULT_FIELD_ERROR: Final = (
    '"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'
)
_CORE_FIELD_ERROR: Final = "field label not supported: {label}"
OBJECT_VERBS: Final = ("create", "delete", "deletecollection", "get", "list", "patch", "update")


def _fields(*names: str, **aliases: str) -> Mapping[str, str]:
    table = dict(_META_FIELDS)
    table.update({name: name for name in names})
    table.update({alias.replace("__", "."): path for alias, path in aliases.items()})
    return MappingProxyType(table)


@dataclass(frozen=True)
class ResourceType:
    """One served resource: ``group/version``, plural, kind, scope and strategy flags.

    ``fields`` maps each field-selector label to the dotted path of its value in the object;
    ``field_error`` is the message for any other label (it differs per kind, as in the server).
    """

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    fields: Mapping[str, str] = field(default_factory=lambda: _META_FIELDS)
    field_error: str = _DEFAULT_FIELD_ERROR
    generation: bool = False
    delete_returns_object: bool = False
    create_on_update: bool = False
    verbs: tuple[str, ...] = (*OBJECT_VERBS, "watch")
    custom: bool = False
    """A custom resource: kubernetes-validate bundles no schema for it, so the fake checks its
    metadata only (its CRD's schema is the real API server's to apply)."""

    @property
    def api_version(self) -> str:
        """``apiVersion`` of the objects: ``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        """Kind of the list objects."""
        return f"{self.kind}List"

    @property
    def key(self) -> str:
        """Unique name: ``plural`` for the core group, else ``plural.group``."""
        return errors.qualified_resource(self.group, self.plural)

    @property
    def has_status(self) -> bool:
        """Whether the type has a ``/status`` subresource (and so a status strategy)."""
        return "status" in self.subresources

    def not_found(self, name: str) -> errors.ApiError:
        """Return the 404 for an object of this type."""
        return errors.not_found(self.group, self.plural, name)

    def conflict(self, name: str, detail: str = errors.OBJECT_MODIFIED) -> errors.ApiError:
        """Return the 409 Conflict for an object of this type."""
        return errors.conflict(self.group, self.plural, name, detail)

    def invalid(self, name: str, errs: list[errors.FieldError]) -> errors.ApiError:
        """Return the 422 Invalid for an object of this type."""
        return errors.invalid_object(self.group, self.kind, name, errs)


RESOURCE = "resource.k8s.io"
ADMISSION: Final = "admissionregistration.k8s.io"
POLICY: Final = "policy"
QUOTA_GROUP: Final = DEFAULT_DRIVER_NAME
"""The API group of GpuShareQuota: the driver name (the fake serves the default one)."""
_SLICE_FIELD_ERROR: Final = "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: "
_CORE_EVENT_FIELDS: Final = _fields(
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "type",
    source="source.component",
)

RESOURCES: Final[tuple[ResourceType, ...]] = (
    ResourceType(
        "", "v1", "namespaces", "namespace", "Namespace", namespaced=False,
        short_names=("ns",), subresources=frozenset({"status"}),
        fields=MappingProxyType({"metadata.name": "metadata.name", "status.phase": "status.phase"}),
        field_error=_CORE_FIELD_ERROR, delete_returns_object=True,
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    ResourceType(
        "", "v1", "nodes", "node", "Node", namespaced=False, short_names=("no",),
        subresources=frozenset({"status"}),
        fields=MappingProxyType(
            {"metadata.name": "metadata.name", "spec.unschedulable": "spec.unschedulable"}
        ),
        field_error=_CORE_FIELD_ERROR,
    ),
    ResourceType(
        "", "v1", "pods", "pod", "Pod", namespaced=True, short_names=("po",),
        subresources=frozenset({"status", "binding", "eviction"}),
        fields=_fields(
            "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
            "status.nominatedNodeName",
        ),
        field_error=_CORE_FIELD_ERROR, generation=True, delete_returns_object=True,
    ),
    ResourceType(
        "", "v1", "events", "event", "Event", namespaced=True, short_names=("ev",),
        fields=_CORE_EVENT_FIELDS, field_error=_CORE_FIELD_ERROR, create_on_update=True,
    ),
    ResourceType(
        "events.k8s.io", "v1", "events", "event", "Event", namespaced=True, short_names=("ev",),
        create_on_update=True,
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "lease", "Lease", namespaced=True),
    ResourceType(
        POLICY, "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget",
        namespaced=True, short_names=("pdb",), subresources=frozenset({"status"}), generation=True,
    ),
    ResourceType(
        RESOURCE, "v1", "resourceslices", "resourceslice", "ResourceSlice", namespaced=False,
        fields=_fields("spec.nodeName", "spec.driver"),
        field_error=_SLICE_FIELD_ERROR + "{label}", generation=True, delete_returns_object=True,
    ),
    ResourceType(
        RESOURCE, "v1", "deviceclasses", "deviceclass", "DeviceClass", namespaced=False,
        generation=True, delete_returns_object=True,
    ),
    ResourceType(
        RESOURCE, "v1", "resourceclaims", "resourceclaim", "ResourceClaim", namespaced=True,
        subresources=frozenset({"status"}), generation=True, delete_returns_object=True,
    ),
    ResourceType(
        RESOURCE, "v1", "resourceclaimtemplates", "resourceclaimtemplate",
        "ResourceClaimTemplate", namespaced=True, generation=True, delete_returns_object=True,
    ),
    ResourceType(
        ADMISSION, "v1", "mutatingwebhookconfigurations", "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration", namespaced=False, generation=True,
    ),
    ResourceType(
        ADMISSION, "v1", "validatingwebhookconfigurations", "validatingwebhookconfiguration",
        "ValidatingWebhookConfiguration", namespaced=False, generation=True,
    ),
    # The chart's CRD (templates/crd-gpusharequota.yaml) for the default driver name: served
    # as a real API server serves it once the CRD is Established.
    ResourceType(
        QUOTA_GROUP, "v1alpha1", "gpusharequotas", "gpusharequota", "GpuShareQuota",
        namespaced=True, subresources=frozenset({"status"}), generation=True,
        delete_returns_object=True, custom=True,
    ),
)  # fmt: skip

# The core group's ``bindings`` collection: create-only, no storage of its own.
BINDINGS: Final = ResourceType(
    "", "v1", "bindings", "binding", "Binding", namespaced=True, verbs=("create",)
)


class Registry:
    """Lookup of served types by URL coordinates, by name and by object."""

    def __init__(self, types: Iterable[ResourceType] = RESOURCES) -> None:
        self.types = tuple(types)
        self._by_url = {(t.group, t.version, t.plural): t for t in self.types}
        self._by_name: dict[str, ResourceType] = {}
        for rtype in self.types:
            self._by_name.setdefault(rtype.plural, rtype)
            self._by_name[rtype.key] = rtype
        self._by_gvk = {(t.api_version, t.kind): t for t in self.types}

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """Return the type served at ``/apis/<group>/<version>/<plural>``, if any."""
        return self._by_url.get((group, version, plural))

    def resolve(self, name: str) -> ResourceType:
        """Return the type named ``plural`` or ``plural.group`` (``events`` is the core one)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"unknown resource {name!r}; known: {sorted(self._by_name)}") from None

    def for_object(self, obj: Mapping[str, Any]) -> ResourceType:
        """Return the type of an object by its ``apiVersion`` and ``kind``."""
        rtype = self._by_gvk.get((str(obj.get("apiVersion", "")), str(obj.get("kind", ""))))
        if rtype is None:
            raise KeyError(f"unserved apiVersion/kind {obj.get('apiVersion')}/{obj.get('kind')}")
        return rtype

    def group_versions(self) -> list[tuple[str, str]]:
        """Every served ``(group, version)``, core first, in a stable order."""
        seen: dict[tuple[str, str], None] = {}
        for rtype in self.types:
            seen.setdefault((rtype.group, rtype.version), None)
        return list(seen)

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        """Return the types served under one ``group/version``."""
        return [t for t in self.types if (t.group, t.version) == (group, version)]


REGISTRY: Final = Registry()
