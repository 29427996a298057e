"""A manifest file as the simulation applies it: documents in file order, workloads as pods.

There is no Deployment, Job or ReplicaSet controller in the harness, so a workload document
becomes the pods its controller would create, by the expansion ``gpushare-dra plan`` uses
(:mod:`dra_driver.plan.workload`: ``replicas`` or ``parallelism`` pods named
``<name>-0``, ``<name>-1``, …). Everything else is created as written. A document's label
``step`` groups it with others that a scenario applies together
(``kubectl apply -f FILE -l step=NAME`` does the same on a real cluster).

The example files name no node, so that they run on any cluster. A scenario's expectations
are written for the nodes of the fake cluster, so a scenario pins what it applies to a node
of it: :meth:`Document.pinned` adds that node to each pod's ``nodeSelector``, in the
simulation only.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Final

import yaml

from dra_driver.k8s.objects import Object
from dra_driver.plan.errors import PlanInputError
from dra_driver.plan.workload import DEFAULT_NAMESPACE, PlannedPod, parse_workload

STEP_LABEL: Final = "step"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
WORKLOAD_KINDS: Final = ("Deployment", "StatefulSet", "ReplicaSet", "Job")


class ManifestError(Exception):
    """A manifest file cannot be used; the message names the file, document and field."""


@dataclasses.dataclass(frozen=True)
class Document:
    """One document of a manifest and, for a Pod or a workload, the pods it makes."""

    index: int
    """Position in the file, counted from 1 as error messages count."""
    body: Object
    pods: tuple[Object, ...]
    """The pods to create; empty for kinds that make none."""

    @property
    def kind(self) -> str:
        """The document's kind."""
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        """The document's name."""
        return str(self.body["metadata"]["name"])

    @property
    def reference(self) -> str:
        """``Kind/name``, as scenarios and reports refer to a document."""
        return f"{self.kind}/{self.name}"

    @property
    def step(self) -> str | None:
        """The value of the ``step`` label, if any."""
        labels = self.body["metadata"].get("labels") or {}
        value = labels.get(STEP_LABEL)
        return None if value is None else str(value)

    def in_namespace(self, namespace: str) -> Document:
        """Return this document with ``namespace`` where the file gives none."""
        if self.body["metadata"].get("namespace") or self.kind in ("Namespace", "DeviceClass"):
            return self
        body = copy.deepcopy(self.body)
        body["metadata"]["namespace"] = namespace
        pods = tuple(_with_namespace(pod, namespace) for pod in self.pods)
        return Document(self.index, body, pods)

    def pinned(self, node: str) -> Document:
        """Return this document with each of its pods held to ``node`` by its hostname label.

        The label joins whatever ``nodeSelector`` the pod already has; a document that makes
        no pods is returned as it is.
        """
        if not self.pods:
            return self
        return Document(self.index, self.body, tuple(_on_node(pod, node) for pod in self.pods))


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The documents of one file, in file order."""

    source: str
    documents: tuple[Document, ...]


def _with_namespace(pod: Object, namespace: str) -> Object:
    pod = copy.deepcopy(pod)
    pod["metadata"]["namespace"] = namespace
    return pod


def _on_node(pod: Object, node: str) -> Object:
    pod = copy.deepcopy(pod)
    spec = pod.setdefault("spec", {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), HOSTNAME_LABEL: node}
    return pod


def _pods_of(body: Object, planned: list[PlannedPod]) -> tuple[Object, ...]:
    if body["kind"] == "Pod":
        return (copy.deepcopy(body),)
    kind, name = body["kind"], body["metadata"]["name"]
    namespace = body["metadata"].get("namespace") or DEFAULT_NAMESPACE
    template = body["spec"]["template"].get("metadata") or {}
    pods = []
    for pod in (p.pod for p in planned if p.owner == f"{kind}/{name}" and p.namespace == namespace):
        metadata = {"name": pod["metadata"]["name"]}
        if body["metadata"].get("namespace"):
            metadata["namespace"] = namespace
        if template.get("labels"):
            # What the workload controller copies from its pod template.
            metadata["labels"] = dict(template["labels"])
        pods.append({**pod, "metadata": metadata})
    return tuple(pods)


def parse_manifest(text: str, source: str) -> Manifest:
    """Decode ``text``; ``source`` names it in errors. Raise :class:`ManifestError`."""
    try:
        workload = parse_workload(text, source)
        bodies = list(yaml.safe_load_all(text))
    except PlanInputError as exc:
        raise ManifestError(str(exc)) from None
    planned = list(workload.pods)
    documents = []
    for index, body in enumerate(bodies, start=1):
        if body is None:
            continue
        pods: tuple[Object, ...] = ()
        if body["kind"] == "Pod" or body["kind"] in WORKLOAD_KINDS:
            pods = _pods_of(body, planned)
        documents.append(Document(index, body, pods))
    return Manifest(source, tuple(documents))


def load_manifest(path: Path) -> Manifest:
    """Read and decode the manifest file at ``path``; raise :class:`ManifestError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_manifest(text, str(path))
