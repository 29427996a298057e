"""A Kubernetes cluster without containers or GPUs, for tests, ``simulate`` and benchmarks.

An API server (our fake one, or a real control plane when a directory of binaries is given),
Node objects made from a fake GPU inventory, and the actors the driver depends on: the
resourceclaim controller and scheduler (fake mode only: a real control plane brings its own)
and one kubelet per node: emulated, or with ``real_kubelets`` the real one
(:mod:`~gpushare_simulator.harness.hollownode`). Each node gets host directories under the
work directory (:class:`NodeDirs`) where a kubelet plugin can serve its sockets.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, Protocol, TypeVar

from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.objects import Object
from dra_driver.nvml.inventory import Inventory, NodeInventory
from dra_driver.plan.inventory import node_object
from gpushare_simulator.harness.actors.cdiresolve import ContainerEdits
from gpushare_simulator.harness.actors.claimcontroller import ResourceClaimController
from gpushare_simulator.harness.actors.kubelet import Kubelet
from gpushare_simulator.harness.actors.scheduler import Scheduler
from gpushare_simulator.harness.apiserver import FakeApiServer
from gpushare_simulator.harness.controlplane import RealControlPlane
from gpushare_simulator.harness.hollownode import HollowNode
from gpushare_simulator.harness.kubeapply import Applier
from gpushare_simulator.harness.kubebin import KUBELET, KubeBinaries
from gpushare_simulator.harness.lifecycle import Lifecycle

T = TypeVar("T")

# What every emulated node offers besides GPUs; enough for any test pod.
_NODE_RESOURCES: Final = {"cpu": "64", "memory": "512Gi", "pods": "110"}


@dataclasses.dataclass(frozen=True)
class NodeDirs:
    """Host directories of one node, as a kubelet plugin sees them."""

    root: Path
    registry: Path
    """Where plugins put their registration sockets."""
    plugins: Path
    """Parent of the per-driver plugin directories."""
    cdi: Path
    """Where plugins write their CDI specs (the kubelet's runtime reads them)."""

    @classmethod
    def under(cls, root: Path) -> NodeDirs:
        """Return the directories of an emulated node, all under ``root``."""
        return cls(root, root / "plugins_registry", root / "plugins", root / "cdi")

    @classmethod
    def of(cls, node: HollowNode) -> NodeDirs:
        """Return the directories a real kubelet uses (its root dir, the node's /var/run/cdi)."""
        return cls(node.root, node.registry, node.plugins, node.cdi_root)


class NodeKubelet(Protocol):
    """What tests and ``simulate`` use of a node's kubelet, emulated or real."""

    @property
    def containers(self) -> dict[tuple[str, str, str], ContainerEdits]:
        """What each running container got from its CDI devices."""

    def complete_pod(self, namespace: str, name: str) -> None:
        """Report the pod's containers as exited with status 0."""


@dataclasses.dataclass(frozen=True)
class _RealKubelet:
    """A real kubelet seen as a :class:`NodeKubelet`."""

    node: HollowNode
    api: client.ApiClient

    @property
    def containers(self) -> dict[tuple[str, str, str], ContainerEdits]:
        return self.node.containers

    def complete_pod(self, namespace: str, name: str) -> None:
        self.node.complete_pod(self.api, namespace, name)


class FakeCluster(Lifecycle):
    """Start with ``with FakeCluster(inventory, work_dir) as cluster:``; everything stops after."""

    def __init__(
        self,
        inventory: Inventory,
        work_dir: Path,
        *,
        kube_version: str = "1.36",
        binaries: KubeBinaries | None = None,
        kubelets: bool = True,
        real_kubelets: bool = False,
    ) -> None:
        self.inventory = inventory
        self.work_dir = work_dir
        self.real = binaries is not None
        if real_kubelets and (binaries is None or not binaries.has(KUBELET)):
            source = binaries.source if binaries else "no directory of binaries"
            raise ValueError(f"real kubelets need {KUBELET}: {source} has none")
        # Real kubelets' directories and sockets live under it: short, for the socket paths.
        # A release before 1.36 as shipped: the API server drops the sharing fields.
        self._since_1_36 = tuple(int(p) for p in kube_version.split(".")[:2]) >= (1, 36)
        gates = {} if self._since_1_36 else {"DRAConsumableCapacity": False}
        self._backend: FakeApiServer | RealControlPlane = (
            RealControlPlane(binaries, work_dir / "cp", extra_gates=gates)
            if binaries is not None
            else FakeApiServer(kube_version=kube_version)
        )
        self._with_kubelets = kubelets
        self.real_kubelets = real_kubelets
        self.api_client: client.ApiClient | None = None
        self.kubelets: dict[str, NodeKubelet] = {}
        self.emulated: dict[str, Kubelet] = {}
        """The emulated kubelets, by node: they also show registered plugins and prepares."""
        self._actors: list[Lifecycle] = []

    @property
    def api(self) -> client.ApiClient:
        """The API client of the running cluster."""
        if self.api_client is None:
            raise RuntimeError("the cluster is not started")
        return self.api_client

    @property
    def server(self) -> FakeApiServer:
        """The fake API server (fault injection, request counts); not in real-binaries mode."""
        if not isinstance(self._backend, FakeApiServer):
            raise RuntimeError("a real control plane has no fake API server")  # noqa: TRY004 - a mode, not a type error
        return self._backend

    def kubeconfig(self) -> Path:
        """Return a kubeconfig for this cluster, so our binaries can run against it unchanged."""
        if isinstance(self._backend, RealControlPlane):
            return self._backend.kubeconfig
        path = self.work_dir / "kubeconfig"
        if not path.exists():
            self._backend.write_kubeconfig(path)
        return path

    def node_dirs(self, node: str) -> NodeDirs:
        """Return the host directories of ``node``."""
        if self.real_kubelets and isinstance(self._backend, RealControlPlane):
            return NodeDirs.of(self._backend.nodes[node])
        return NodeDirs.under(self.work_dir / "nodes" / node)

    def start(self) -> None:
        """Start the API server, register the nodes and start the actors."""
        self._backend.start()
        self.api_client = self._backend.api_client()
        if self.real_kubelets and isinstance(self._backend, RealControlPlane):
            for node in self.inventory.nodes:
                self._start_real_kubelet(self._backend, node, self.api_client)
        else:
            self._register_nodes(self.api_client)
        if not self.real:
            self._actors += [
                ResourceClaimController(self.api_client),
                Scheduler(self.api_client, sets_allocation_timestamp=self._since_1_36),
            ]
        if self._with_kubelets and not self.real_kubelets:
            for node in self.inventory.nodes:
                dirs = self.node_dirs(node.name)
                for path in (dirs.registry, dirs.plugins, dirs.cdi):
                    path.mkdir(parents=True, exist_ok=True)
                kubelet = Kubelet(self.api_client, node.name, dirs.registry, [dirs.cdi])
                self.kubelets[node.name] = self.emulated[node.name] = kubelet
                self._actors.append(kubelet)
        for actor in self._actors:
            actor.start()

    def _start_real_kubelet(
        self, plane: RealControlPlane, node: NodeInventory, api: client.ApiClient
    ) -> None:
        """Start the node's kubelet; give its Node the inventory's labels, taints, cordon."""
        hollow = plane.add_node(node.name)
        wanted = node_object(node)
        patch = {"metadata": {"labels": wanted["metadata"]["labels"]}, "spec": wanted["spec"]}
        core = client.CoreV1Api(api)
        raw.call(core.patch_node, node.name, patch, _content_type=raw.MERGE_PATCH)
        for path in (hollow.registry, hollow.plugins, hollow.cdi_root):
            path.mkdir(parents=True, exist_ok=True)
        self.kubelets[node.name] = _RealKubelet(hollow, api)

    def _register_nodes(self, api: client.ApiClient) -> None:
        """Create the inventory's Nodes, Ready, for the emulated kubelets."""
        core = client.CoreV1Api(api)
        for node in self.inventory.nodes:
            created = raw.call(core.create_node, node_object(node))
            status = {
                "capacity": _NODE_RESOURCES,
                "allocatable": _NODE_RESOURCES,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "emulated kubelet",
                    }
                ],
            }
            raw.call(core.replace_node_status, node.name, {**created, "status": status})

    def stop(self) -> None:
        """Stop the actors and the API server; safe after a failed start."""
        for actor in reversed(self._actors):
            actor.stop()
        self._actors.clear()
        if self.api_client is not None:
            self.api_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream
            self.api_client = None
        self._backend.stop()

    # -- conveniences for tests and the simulator -----------------------------------------

    def apply(self, documents: Iterable[Object], namespace: str = "default") -> list[Object]:
        """Create each object as users do (YAML); return what the server stored.

        Not the Python client's spaced JSON: a real API server keeps a claim's opaque
        parameters as sent, and a claim stored spaced can take no patch from any JSON client.
        """
        return Applier(self.api).create(list(documents), namespace)

    def wait_for(self, condition: Callable[[], T | None], what: str, timeout: float = 10.0) -> T:
        """Poll ``condition`` until it returns something other than None or False."""
        deadline = time.monotonic() + timeout
        while True:
            result = condition()
            if result is not None and result is not False:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.1f} s waiting for {what}")
            time.sleep(0.02)
