"""Which admission webhooks a request goes to (``generic.ShouldCallHook`` and its predicates).

``rules`` match on operation, group, version, scope and ``resource`` or ``resource/subresource``
(``*`` wildcards as in ``predicates/rules``); ``namespaceSelector`` matches the namespace's labels
(cluster-scoped objects always match; a Namespace is matched by its own labels);
``objectSelector`` matches the new or the old object's labels. Webhook configurations are exempt.
``matchPolicy: Equivalent`` matches only the served version (there is no conversion here), and
``matchConditions`` (CEL) are not evaluated: a webhook that has them fails the request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Final

from dra_driver.k8s import objects
from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.resources import ADMISSION, REGISTRY, ResourceType
from gpushare_simulator.harness.apiserver.selectors import LabelSelector, object_label_selector
from gpushare_simulator.harness.apiserver.store import Store

JSON = dict[str, Any]
LOG: Final = logging.getLogger("gpushare_simulator.harness.apiserver.admission")
NAMESPACES: Final = REGISTRY.resolve("namespaces")
_OPTIONS: Final = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


@dataclass(frozen=True)
class Request:
    """What is being admitted (``admission.Attributes``)."""

    operation: str  # CREATE, UPDATE or DELETE
    rtype: ResourceType
    namespace: str  # for a Namespace (but its creation): its own name, as the server sets it
    name: str
    obj: JSON | None
    old: JSON | None
    subresource: str
    dry_run: bool
    options: JSON

    @classmethod
    def of(
        cls,
        operation: str,
        rtype: ResourceType,
        namespace: str,
        obj: JSON | None,
        old: JSON | None = None,
        *,
        subresource: str = "",
        dry_run: bool = False,
        options: JSON | None = None,
    ) -> Request:
        """Build a request's attributes; ``options`` is the DeleteOptions of a delete."""
        meta = ((obj if obj is not None else old) or {}).get("metadata") or {}
        name = str(meta.get("name") or "")
        if rtype.key == "namespaces" and operation != "CREATE":
            namespace = name
        kind = {"kind": _OPTIONS[operation], "apiVersion": "meta.k8s.io/v1"}
        opts = {**(options or {}), **kind} | ({"dryRun": ["All"]} if dry_run else {})
        return cls(operation, rtype, namespace, name, obj, old, subresource, dry_run, opts)

    def with_object(self, obj: JSON) -> Request:
        """Return the same request about ``obj`` (named as it is now, e.g. once generated)."""
        name = str(objects.metadata(obj).get("name") or "") or self.name
        return replace(self, obj=obj, name=name)


@dataclass(frozen=True)
class Hook:
    """One webhook of one configuration."""

    configuration: str
    index: int
    spec: JSON

    @property
    def name(self) -> str:
        """The webhook's name, as messages quote it."""
        return str(self.spec.get("name") or "")

    @property
    def uid(self) -> str:
        """Identity for reinvocation (the server's ``configuration/webhook/index``)."""
        return f"{self.configuration}/{self.name}/{self.index}"


def _selector(spec: object) -> LabelSelector:
    """Return a ``metav1.LabelSelector`` as a parsed selector (``{}`` matches everything)."""
    parsed = object_label_selector(spec)
    if parsed is None:
        raise errors.internal("a label selector has an operator that is not valid")
    return parsed


def _labels(obj: JSON | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _rule_matches(rule: JSON, request: Request) -> bool:
    """``rules.Matcher``: operation, group, version, scope and resource/subresource."""
    rtype = request.rtype

    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    if not (
        has("operations", request.operation)
        and has("apiGroups", rtype.group)
        and has("apiVersions", rtype.version)
    ):
        return False
    cluster = rtype.key == "namespaces" or not request.namespace
    scope = rule.get("scope") or "*"
    if scope not in {"*", "Cluster" if cluster else "Namespaced"}:
        return False
    for entry in rule.get("resources") or []:
        resource, _, sub = str(entry).partition("/")
        if resource in {"*", rtype.plural} and sub in {"*", request.subresource}:
            return True
    return False


def hooks(store: Store, kind: ResourceType, request: Request) -> list[Hook]:
    """Every webhook of every configuration of ``kind``, unless ``request`` is exempt."""
    if request.rtype.group == ADMISSION:  # IsExemptAdmissionConfigurationResource
        return []
    entries, _ = store.snapshot(kind, None)  # in name order, as the server sorts them
    return [
        Hook(entry.obj["metadata"]["name"], index, spec)
        for entry in entries
        for index, spec in enumerate(entry.obj.get("webhooks") or [])
    ]


def _namespace_matches(store: Store, spec: object, request: Request) -> bool:
    """``namespace.Matcher``; a missing namespace is its 404."""
    selector = _selector(spec)
    is_namespace = request.rtype.key == "namespaces"
    if not selector.requirements or not (request.namespace or is_namespace):
        return True
    if is_namespace and not request.subresource and request.operation != "DELETE":
        labels = _labels(request.obj)
    else:
        entry = store.get(NAMESPACES, "", request.namespace)
        if entry is None:
            raise errors.not_found("", "namespaces", request.namespace)
        labels = _labels(entry.obj)
    return all(requirement.matches(labels) for requirement in selector.requirements)


def should_call(store: Store, hook: Hook, request: Request) -> bool:
    """``ShouldCallHook``: rules, namespace and object selectors; matchConditions refused."""
    spec = hook.spec
    if not any(_rule_matches(rule, request) for rule in spec.get("rules") or []):
        return False
    if not _namespace_matches(store, spec.get("namespaceSelector"), request):
        return False
    selector = _selector(spec.get("objectSelector"))
    if selector.requirements and not any(
        all(r.matches(_labels(obj)) for r in selector.requirements)
        for obj in (request.obj, request.old)
        if obj is not None
    ):
        return False
    if spec.get("matchConditions"):
        detail = (
            f'webhook "{hook.name}" has matchConditions, whose CEL the fake API server does '
            "not evaluate"
        )
        LOG.error("admission: %s", detail)
        raise errors.internal(detail)
    return True
