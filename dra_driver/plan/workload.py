"""A workload file: the pods it would create and the ResourceClaims each pod would use.

A multi-document YAML of Pods, Deployments, StatefulSets, ReplicaSets and Jobs with the
ResourceClaimTemplates, ResourceClaims and DeviceClasses they use, and the
PodDisruptionBudgets that guard them against preemption (:mod:`dra_driver.plan.budgets`).
A pod keeps the labels of its Pod document or its template. Documents of other kinds
(Namespaces, ConfigMaps, Services: all of an application's ``helm template`` output) are
skipped and listed, so the report can say so. Each object's ``apiVersion`` must be one the API
server serves for its kind, and names must be valid Kubernetes names, as ``kubectl apply``
would require.
A Deployment, StatefulSet or ReplicaSet becomes ``spec.replicas`` pods (default 1), a Job
``spec.parallelism`` pods (default 1), named ``<name>-0``, ``<name>-1``, …, in file order.

A pod entry naming a template gets its own claim ``<pod>-<entry>``, as kube-controller-manager
would create it; an entry naming a ResourceClaim of the file shares that claim with every pod
that names it. Errors name the file, the document (counted from 1), the field and the pod::

    work.yaml: document 3 (Deployment infer): spec.template.spec.resourceClaims[0]
    .resourceClaimTemplateName: pod infer-0 entry gpu: no ResourceClaimTemplate "x" in
    namespace "default" in the file
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from dra_driver.k8s import objects
from dra_driver.k8s.names import LABEL_RULE, SUBDOMAIN_RULE, is_dns_label, is_dns_subdomain
from dra_driver.k8s.objects import Object
from dra_driver.plan.budgets import budget_problem
from dra_driver.plan.errors import PlanInputError

DEFAULT_NAMESPACE: Final = "default"
_REPLICAS: Final = {
    "Deployment": "replicas",
    "StatefulSet": "replicas",
    "ReplicaSet": "replicas",
    "Job": "parallelism",
}
_RESOURCE_VERSIONS: Final = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")
"""The versions whose claims have the shape plan reads (``exactly``, ``firstAvailable``)."""
_API_VERSIONS: Final = {
    "Pod": ("v1",),
    "Deployment": ("apps/v1",),
    "StatefulSet": ("apps/v1",),
    "ReplicaSet": ("apps/v1",),
    "Job": ("batch/v1",),
    "ResourceClaimTemplate": _RESOURCE_VERSIONS,
    "ResourceClaim": _RESOURCE_VERSIONS,
    "DeviceClass": _RESOURCE_VERSIONS,
    "PodDisruptionBudget": ("policy/v1",),
}
# Fixed, so the same file always yields the same claim UIDs (and the same JSON report).
_UID_NAMESPACE: Final = uuid.UUID("5d2b8c1e-7f3a-4e6b-8c9d-1a2b3c4d5e6f")


@dataclasses.dataclass(frozen=True)
class FileClaim:
    """A claim of the workload file, written there or generated from a template of it."""

    claim: Object
    origin: str
    """The document it comes from: ``ResourceClaimTemplate default/x (document 3)``."""
    spec_path: str
    """Where the claim's spec is in that document: ``spec.spec`` or ``spec``."""


@dataclasses.dataclass(frozen=True)
class PodClaim(FileClaim):
    """One entry of a pod's ``spec.resourceClaims`` and the claim of the file it resolves to."""

    entry: str
    shared: bool
    """Named by ``resourceClaimName``: one claim for every pod that names it."""


@dataclasses.dataclass(frozen=True)
class PlannedPod:
    """A pod the workload would create."""

    pod: Object
    owner: str
    """What creates it: ``Deployment/infer``, or ``Pod/<name>`` for a bare pod."""
    claims: tuple[PodClaim, ...]

    @property
    def name(self) -> str:
        """The pod's name."""
        return str(self.pod["metadata"]["name"])

    @property
    def namespace(self) -> str:
        """The pod's namespace."""
        return str(self.pod["metadata"]["namespace"])


@dataclasses.dataclass(frozen=True)
class Workload:
    """The pods of a workload file, in file order, and the DeviceClasses it brings."""

    source: str
    pods: tuple[PlannedPod, ...]
    classes: tuple[Object, ...]
    unused: tuple[FileClaim, ...] = ()
    skipped: tuple[str, ...] = ()
    """Documents of kinds plan does not place: ``ConfigMap default/app (document 4)``."""
    budgets: tuple[Object, ...] = ()
    """The file's PodDisruptionBudgets, namespace set."""


@dataclasses.dataclass(frozen=True)
class _Document:
    index: int
    body: Object

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        return str(objects.metadata(self.body).get("name", ""))

    @property
    def namespace(self) -> str:
        return str(objects.metadata(self.body).get("namespace") or DEFAULT_NAMESPACE)

    @property
    def label(self) -> str:
        where = self.name if self.kind == "DeviceClass" else f"{self.namespace}/{self.name}"
        return f"{self.kind} {where} (document {self.index})"


class _Reader:
    """Decodes the documents of one file; every error names the file and the document."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.templates: dict[tuple[str, str], _Document] = {}
        self.claims: dict[tuple[str, str], tuple[Object, str]] = {}
        """Each ResourceClaim of the file, with its document's label."""
        self.classes: dict[str, _Document] = {}
        self.budgets: dict[tuple[str, str], Object] = {}
        self.pod_names: dict[tuple[str, str], int] = {}
        self.used: set[tuple[str, str, str]] = set()
        """(kind, namespace, name) of each template and claim a pod uses."""

    def fail(self, document: _Document, field: str, problem: str) -> PlanInputError:
        what = " ".join(part for part in (document.kind or "no kind", document.name) if part)
        return PlanInputError(
            f"{self.source}: document {document.index} ({what}): {field}: {problem}"
        )

    def mapping(self, document: _Document, parent: Mapping[str, Any], path: str) -> Object:
        """Return the object at ``path`` (dot-separated) below ``parent``; refuse anything else."""
        value: Any = parent
        for key in path.split("."):
            value = value.get(key) if isinstance(value, Mapping) else None
            if not isinstance(value, Mapping):
                raise self.fail(document, path, "expected an object")
        return dict(value)

    def collect(self, document: _Document) -> bool:
        """Check a document's kind, version and names, and keep what pods refer to.

        Return ``False`` for a document of a kind plan does not place (it is skipped).
        """
        if not document.kind:
            raise self.fail(document, "kind", "required")
        versions = _API_VERSIONS.get(document.kind)
        if versions is None:
            return False
        version = document.body.get("apiVersion")
        if version not in versions:
            problem = f"{version!r} does not serve {document.kind}; allowed: {', '.join(versions)}"
            raise self.fail(document, "apiVersion", problem)
        if not document.name:
            raise self.fail(document, "metadata.name", "required")
        if not is_dns_subdomain(document.name):
            raise self.fail(document, "metadata.name", f"{document.name!r} is not {SUBDOMAIN_RULE}")
        if not is_dns_label(document.namespace):
            problem = f"{document.namespace!r} is not {LABEL_RULE}"
            raise self.fail(document, "metadata.namespace", problem)
        key = (document.namespace, document.name)
        if document.kind == "ResourceClaimTemplate":
            self.mapping(document, document.body, "spec.spec")
            self._unique(document, self.templates, key)
            self.templates[key] = document
        elif document.kind == "ResourceClaim":
            self._unique(document, self.claims, key)
            spec = self.mapping(document, document.body, "spec")
            claim = self._claim(document, spec, document.name, document.name)
            self.claims[key] = (claim, document.label)
        elif document.kind == "DeviceClass":
            self._unique(document, self.classes, document.name)
            self.classes[document.name] = document
        elif document.kind == "PodDisruptionBudget":
            self._unique(document, self.budgets, key)
            wrong = budget_problem(document.body)
            if wrong is not None:
                raise self.fail(document, *wrong)
            metadata = {**objects.metadata(document.body), "namespace": document.namespace}
            self.budgets[key] = {**document.body, "metadata": metadata}
        return True

    def _unique(self, document: _Document, seen: Mapping[Any, Any], key: object) -> None:
        if key in seen:
            raise self.fail(document, "metadata.name", f"a second {document.kind} of this name")

    @staticmethod
    def _claim(document: _Document, spec: Object, name: str, identity: str) -> Object:
        """Return a ResourceClaim as the API server would hold it, with a stable UID.

        ``identity`` (the claim's name, or ``<pod>/<entry>`` for a generated one) seeds the
        UID, so a generated claim never shares one with a claim of the file.
        """
        claim_uid = uuid.uuid5(_UID_NAMESPACE, f"{document.namespace}/{identity}")
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": document.namespace, "uid": str(claim_uid)},
            "spec": copy.deepcopy(spec),
        }

    def pods(self, document: _Document) -> Iterator[PlannedPod]:
        """Yield the pods a Pod or workload document creates; other kinds create none."""
        if document.kind == "Pod":
            specs = [(document.name, "spec", self.mapping(document, document.body, "spec"))]
            labels = objects.metadata(document.body).get("labels")
        elif document.kind in _REPLICAS:
            field = _REPLICAS[document.kind]
            count = self.mapping(document, document.body, "spec").get(field, 1)
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                problem = f"expected a whole number, got {count!r}"
                raise self.fail(document, f"spec.{field}", problem)
            path = "spec.template.spec"
            pod_spec = self.mapping(document, document.body, path)
            specs = [(f"{document.name}-{i}", path, pod_spec) for i in range(count)]
            template = document.body["spec"]["template"]
            labels = objects.metadata(template).get("labels")
        else:
            return
        for name, path, spec in specs:
            key = (document.namespace, name)
            if key in self.pod_names:
                problem = f"pod {name} is also created by document {self.pod_names[key]}"
                raise self.fail(document, "metadata.name", problem)
            self.pod_names[key] = document.index
            metadata: Object = {"name": name, "namespace": document.namespace}
            if isinstance(labels, dict) and labels:
                metadata["labels"] = dict(labels)
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
            claims = tuple(self._pod_claims(document, name, path, spec))
            yield PlannedPod(pod, f"{document.kind}/{document.name}", claims)

    def _pod_claims(
        self, document: _Document, pod: str, path: str, spec: Object
    ) -> Iterator[PodClaim]:
        entries = spec.get("resourceClaims") or []
        if not isinstance(entries, list):
            raise self.fail(document, f"{path}.resourceClaims", "expected a list")
        for index, entry in enumerate(entries):
            at = f"{path}.resourceClaims[{index}]"
            if not isinstance(entry, Mapping) or not entry.get("name"):
                raise self.fail(document, f"{at}.name", "required")
            name = str(entry["name"])
            template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
            if bool(template) == bool(claim):
                problem = (
                    f"pod {pod} entry {name}: needs exactly one of resourceClaimName "
                    "and resourceClaimTemplateName"
                )
                raise self.fail(document, at, problem)
            if template:
                found = self.templates.get((document.namespace, str(template)))
                self.used.add(("ResourceClaimTemplate", document.namespace, str(template)))
                if found is not None:
                    generated = self._claim(
                        document, found.body["spec"]["spec"], f"{pod}-{name}", f"{pod}/{name}"
                    )
                    yield PodClaim(generated, found.label, "spec.spec", entry=name, shared=False)
                    continue
                field, kind, wanted = "resourceClaimTemplateName", "ResourceClaimTemplate", template
            else:
                shared = self.claims.get((document.namespace, str(claim)))
                self.used.add(("ResourceClaim", document.namespace, str(claim)))
                if shared is not None:
                    yield PodClaim(shared[0], shared[1], "spec", entry=name, shared=True)
                    continue
                field, kind, wanted = "resourceClaimName", "ResourceClaim", claim
            problem = (
                f"pod {pod} entry {name}: no {kind} {str(wanted)!r} in namespace "
                f"{document.namespace!r} in the file"
            )
            raise self.fail(document, f"{at}.{field}", problem)


def parse_workload(text: str, source: str) -> Workload:
    """Decode a workload file's ``text``; ``source`` names it in error messages."""
    try:
        bodies = list(yaml.safe_load_all(text))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise PlanInputError(f"{source}: invalid YAML{at}: {problem}") from None
    except yaml.YAMLError as exc:
        raise PlanInputError(f"{source}: invalid YAML: {exc}") from None
    reader = _Reader(source)
    documents, skipped = [], []
    for index, body in enumerate(bodies, start=1):
        if body is None:  # an empty document, e.g. after a trailing ---
            continue
        if not isinstance(body, dict):
            raise PlanInputError(f"{source}: document {index}: expected an object with a kind")
        document = _Document(index, body)
        if reader.collect(document):
            documents.append(document)
        else:
            skipped.append(document.label)
    # Pods may come before the templates and claims they use, so they are expanded last.
    pods = tuple(pod for document in documents for pod in reader.pods(document))
    classes = tuple(d.body for d in reader.classes.values())
    unused = tuple(_unused(reader, documents))
    budgets = tuple(reader.budgets.values())
    return Workload(source, pods, classes, unused, tuple(skipped), budgets)


def _unused(reader: _Reader, documents: list[_Document]) -> Iterator[FileClaim]:
    """Yield the templates and claims no pod uses, as claims the plan can still judge."""
    for document in documents:
        key = (document.kind, document.namespace, document.name)
        if document.kind not in ("ResourceClaimTemplate", "ResourceClaim") or key in reader.used:
            continue
        if document.kind == "ResourceClaim":
            claim, _ = reader.claims[document.namespace, document.name]
            yield FileClaim(claim, document.label, "spec")
        else:
            spec = document.body["spec"]["spec"]
            claim = reader._claim(document, spec, document.name, f"template/{document.name}")
            yield FileClaim(claim, document.label, "spec.spec")


def load_workload(path: Path) -> Workload:
    """Read and decode the workload file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise PlanInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_workload(text, str(path))
