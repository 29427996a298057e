"""The real-plane suite's cluster: a real control plane, real kubelets, the chart installed.

Objects are created as users create them: ``kubectl apply`` of YAML (kubectl sends Go's
compact JSON). Containers' environments are read as a CDI runtime would build them: from the
CDI IDs the real kubelet handed the runtime, resolved against the plugin's CDI specs.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml
from gpushare_simulator.harness.actors.cdiresolve import resolve
from gpushare_simulator.harness.chartinstall import ChartInstall
from gpushare_simulator.harness.controlplane import RealControlPlane
from kubernetes import client

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.k8s import raw

Object = dict[str, Any]
T = TypeVar("T")

ROOT: Final = Path(__file__).resolve().parents[2]
TOOLS: Final = ROOT / ".tools" / "bin"
EXAMPLES: Final = ROOT / "deploy" / "examples"
CHART: Final = ROOT / "deploy" / "helm" / "gpushare-dra-driver"
NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
GPU_LABELS: Final = {"nvidia.com/gpu.present": "true"}
_WORKLOADS: Final = ("Pod", "Deployment", "Job", "StatefulSet", "ReplicaSet")


def wait_for(condition: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    """Poll ``condition`` until it returns something other than None or False."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def pinned(documents: list[Object], node: str) -> list[Object]:
    """Return the documents with every pod template pinned to ``node`` (a nodeSelector)."""
    pinned_documents = []
    for document in documents:
        copied = copy.deepcopy(document)
        if copied["kind"] in _WORKLOADS:
            spec = copied["spec"] if copied["kind"] == "Pod" else copied["spec"]["template"]["spec"]
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        pinned_documents.append(copied)
    return pinned_documents


def example(name: str) -> list[Object]:
    """Return the documents of ``deploy/examples/<name>.yaml``."""
    return [d for d in yaml.safe_load_all((EXAMPLES / f"{name}.yaml").read_text()) if d]


@dataclasses.dataclass
class Cluster:
    """Return the running plane, its nodes' kubelets and the installed driver."""

    plane: RealControlPlane
    driver: ChartInstall
    namespaces: list[str] = dataclasses.field(default_factory=list)

    @property
    def api(self) -> client.ApiClient:
        """Return the admin's API client."""
        return self.driver.api

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl (hack/install-tools.sh puts it in .tools/bin) as the admin."""
        result = subprocess.run(
            [str(TOOLS / "kubectl"), f"--kubeconfig={self.plane.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def apply(self, documents: list[Object], namespace: str) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` the documents as one YAML stream, in ``namespace``."""
        text = yaml.safe_dump_all(documents, sort_keys=False)
        return self.kubectl("apply", "-n", namespace, "-f", "-", stdin=text, check=False)

    def describe(self, namespace: str) -> str:
        """Pods, claims, events and the programs' log tails: what a failed wait needs."""
        lines = [
            self.kubectl(
                "get", "pods,resourceclaims", "-n", namespace, "-o", "wide", check=False
            ).stdout
        ]
        lines += [self.kubectl("get", "events", "-n", namespace, check=False).stdout]
        lines += [process.tail(12) for process in self.driver.processes.values()]
        return "\n".join(lines)

    def wait(
        self, condition: Callable[[], T | None], what: str, namespace: str, timeout: float = 30.0
    ) -> T:
        """``wait_for``, describing the namespace when it times out."""
        try:
            return wait_for(condition, what, timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.describe(namespace)}") from None

    def pods(self, namespace: str) -> list[Object]:
        """Return the namespace's pods."""
        core = client.CoreV1Api(self.api)
        items: list[Object] = raw.call(core.list_namespaced_pod, namespace).get("items") or []
        return items

    def pod(self, namespace: str, prefix: str) -> Object | None:
        """Return the one pod whose name starts with ``prefix`` (a Job's…), or None."""
        found = [p for p in self.pods(namespace) if p["metadata"]["name"].startswith(prefix)]
        return found[0] if len(found) == 1 else None

    def running(self, namespace: str, prefix: str) -> Object | None:
        """Return the pod of ``prefix`` once Running, else None."""
        pod = self.pod(namespace, prefix)
        return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None

    def claims(self, namespace: str) -> list[Object]:
        """Return the namespace's ResourceClaims."""
        resource = client.ResourceV1Api(self.api)
        items: list[Object] = (
            raw.call(resource.list_namespaced_resource_claim, namespace).get("items") or []
        )
        return items

    def env(self, pod: Object, container: str) -> dict[str, str]:
        """Return the env the pod's container gets from its CDI devices, as a runtime would."""
        node = self.plane.nodes[pod["spec"]["nodeName"]]
        metadata = pod["metadata"]
        record = wait_for(
            lambda: node.container(metadata["namespace"], metadata["name"], container),
            f"the kubelet to create {metadata['name']}/{container}",
        )
        return resolve(record.cdi_devices, [node.root / "var" / "run" / "cdi"]).env

    def events(self, namespace: str, name: str) -> list[str]:
        """Return the messages of the events about object ``name``."""
        core = client.CoreV1Api(self.api)
        items = raw.call(core.list_namespaced_event, namespace).get("items") or []
        return [e.get("message") or "" for e in items if e["involvedObject"]["name"] == name]

    def ours_left(self) -> list[str]:
        """Every claim anywhere still carrying our finalizer, and pods still gated by us."""
        resource, core = client.ResourceV1Api(self.api), client.CoreV1Api(self.api)
        claims = raw.call(resource.list_resource_claim_for_all_namespaces).get("items") or []
        pods = raw.call(core.list_pod_for_all_namespaces).get("items") or []
        return [
            f"claim {c['metadata']['namespace']}/{c['metadata']['name']}"
            for c in claims
            if NAMES.finalizer in (c["metadata"].get("finalizers") or [])
        ] + [
            f"pod {p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in pods
            if any(
                g["name"] == NAMES.scheduling_gate for g in p["spec"].get("schedulingGates") or []
            )
        ]

    def json(self, *args: str) -> Object:
        """``kubectl get … -o json`` as a dict."""
        result: Object = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return result


def one_service(
    cluster: Cluster, namespace: str, node: str, *, gates: list[str] | None = None
) -> str:
    """Apply the sharing example's first service (its template, 40 cores, 5Gi) on ``node``.

    Returns the Deployment's name, the prefix of its pod's name; ``gates`` are scheduling
    gates of other controllers the pod is created with.
    """
    documents = pinned(example("sharing"), node)
    template = documents[0]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert spec["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    assert cluster.apply([template, deployment], namespace).returncode == 0
    return str(deployment["metadata"]["name"])


def step(documents: list[Object], name: str) -> list[Object]:
    """Return the documents labelled ``step: <name>`` (``kubectl apply -l step=<name>``)."""
    return [d for d in documents if (d["metadata"].get("labels") or {}).get("step") == name]


def unlabelled(documents: list[Object]) -> list[Object]:
    """Return the documents of no step."""
    return [d for d in documents if "step" not in (d["metadata"].get("labels") or {})]


@contextlib.contextmanager
def unhealthy(inventory: Path, node: str, device: str) -> Iterator[None]:
    """Mark ``node``'s card ``device`` (gpu-N: index N) unhealthy in the fake NVML; undo after."""
    original = inventory.read_text()
    cards = yaml.safe_load(original)
    index = int(device.removeprefix("gpu-"))
    for entry in cards["nodes"]:
        if entry["name"] == node:
            card = next(c for c in entry["cards"] if c["index"] == index)
            card["health"], card["healthMessage"] = "Unhealthy", "XID 79: fallen off the bus"
    inventory.write_text(yaml.safe_dump(cards, sort_keys=False))
    try:
        yield
    finally:
        inventory.write_text(original)


@contextlib.contextmanager
def fresh_namespace(cluster: Cluster) -> Iterator[str]:
    """Create a namespace; on exit empty it of pods and claims, and check nothing of ours is left.

    The Namespace object itself goes later, in the background: kube-controller-manager's
    namespace controller starts 5 s after the deletion and again 5 s after each pass that left
    objects, which was 5-10 s of every test. :func:`namespaces_gone` checks at the session's end
    that every one went (what a real API server showed: claims stuck Terminating keep their
    namespace for ever).
    """
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    cluster.namespaces.append(name)
    yield name
    clear_namespace(cluster, name)


def clear_namespace(cluster: Cluster, name: str) -> None:
    """Delete namespace ``name``; wait until its pods and claims are gone and nothing of ours is.

    Terminating first: admission then refuses new objects in it, so no Deployment or Job brings
    a pod back. Pods get a grace period of 1 s, not 0: each is gone once its node's kubelet has
    stopped it and unprepared its claims, as with a namespace controller's deletion, not when
    the API server forgets it (a forced deletion). Claims that belong to no pod are deleted too,
    and are gone once released (our finalizer off).
    """
    core, resource = client.CoreV1Api(cluster.api), client.ResourceV1Api(cluster.api)
    raw.call(core.delete_namespace, name)

    def cleared() -> bool:
        pods, claims = cluster.pods(name), cluster.claims(name)
        if any(not p["metadata"].get("deletionTimestamp") for p in pods):
            raw.call(core.delete_collection_namespaced_pod, name, grace_period_seconds=1)
        if any(not c["metadata"].get("deletionTimestamp") for c in claims):
            raw.call(resource.delete_collection_namespaced_resource_claim, name)
        return not pods and not claims

    cluster.wait(cleared, f"{name}'s pods and claims to go (claims stuck Terminating?)", name, 60)
    assert cluster.ours_left() == []


def namespaces_gone(cluster: Cluster, timeout: float = 60.0) -> None:
    """Wait until every namespace :func:`fresh_namespace` made is gone; name any that stays."""
    core = client.CoreV1Api(cluster.api)

    def left() -> list[Object]:
        items: list[Object] = raw.call(core.list_namespace).get("items") or []
        return [n for n in items if n["metadata"]["name"] in cluster.namespaces]

    try:
        wait_for(lambda: not left(), "the tests' namespaces to be deleted", timeout)
    except TimeoutError:
        stuck = {
            n["metadata"]["name"]: [
                c.get("message")
                for c in (n.get("status") or {}).get("conditions") or []
                if c.get("status") == "True"
            ]
            for n in left()
        }
        raise AssertionError(f"namespaces stuck Terminating: {stuck}") from None
