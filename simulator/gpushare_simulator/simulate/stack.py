"""The simulated cluster: the harness and the driver's real components, started and stopped.

In one temporary directory under ``/tmp`` (unix socket paths must stay short): the harness
(:class:`~gpushare_simulator.harness.cluster.FakeCluster`: the fake API server with the
emulated claim controller, scheduler and kubelets; or, given binaries, a real control plane
with a real kubelet per node), one kubelet plugin per node serving its real gRPC sockets
(:func:`dra_driver.kubeletplugin.plugin.run` in a thread, on fake cards), the admission
webhook over HTTPS, registered with the API server as the chart registers it, and the
allocation controller. :meth:`Stack.stop` stops all of it, newest first, and removes the
directory, whatever state a failed start left. The fake API server serves GpuShareQuotas as
if the chart's CRD were installed; a real control plane is given a CRD for them before the
controller starts (:func:`quota_crd`), so the controller's quota informer finds them served.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.api import QUOTA_KIND, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.controller.app import Controller
from dra_driver.controller.settings import ControllerSettings
from dra_driver.k8s import raw
from dra_driver.k8s.client import new_api_client
from dra_driver.k8s.objects import Object
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.kubeletplugin import plugin
from dra_driver.kubeletplugin.settings import KubeletPluginSettings
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.nvml.inventory import Inventory, dump_inventory
from dra_driver.webhook.run import Webhook, WebhookConfigError, serve
from dra_driver.webhook.settings import WebhookSettings
from gpushare_simulator.harness.certs import write_self_signed
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.controlplane import ControlPlaneError
from gpushare_simulator.harness.kubebin import CONTROLLER_MANAGER, KUBELET, SCHEDULER, KubeBinaries
from gpushare_simulator.harness.lifecycle import Lifecycle

START_TIMEOUT_SECONDS: Final = 30.0
REAL_START_TIMEOUT_SECONDS: Final = 180.0
"""A real control plane and its kubelets take 20-60 s to start on two cores."""
NEEDED_BINARIES: Final = (CONTROLLER_MANAGER, SCHEDULER)
"""What a real plane needs besides etcd and kube-apiserver to run pods from templates."""
# The chart's values (docs/webhook.md): an outage must not block the cluster's other work.
_WEBHOOK_TIMEOUT_SECONDS: Final = 5
_PLUGIN_JOIN_SECONDS: Final = 30.0


class StackError(Exception):
    """The simulated cluster could not start."""


def webhook_configurations(names: DriverNames, port: int, ca_bundle: bytes) -> list[Object]:
    """Return the chart's webhook configurations, pointed at the local webhook's port."""

    def hook(name: str, path: str, rule: Object) -> Object:
        return {
            "name": f"{name}.{names.driver}",
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}/{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            },
            "rules": [{"operations": ["CREATE"], "apiVersions": ["v1"], **rule}],
            "failurePolicy": "Ignore",
            "timeoutSeconds": _WEBHOOK_TIMEOUT_SECONDS,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }

    pods = {"apiGroups": [""], "resources": ["pods"]}
    claims = {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "resourceclaimtemplates"],
    }
    mutating = [hook("mutate", "mutate", pods), hook("capacity", "mutate", claims)]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": names.driver},
            "webhooks": webhooks,
        }
        for kind, webhooks in (
            ("MutatingWebhookConfiguration", mutating),
            ("ValidatingWebhookConfiguration", [hook("validate", "validate", claims)]),
        )
    ]


def quota_crd(names: DriverNames) -> Object:
    """Return a CustomResourceDefinition that serves GpuShareQuotas, with their status.

    What the chart's CRD serves, without its schema's checks: the driver checks every quota
    again as it reads it (:mod:`dra_driver.quota.model`), and the simulation creates only the
    examples' quotas.
    """
    group, version = names.quota_group_version
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema = {"type": "object", "properties": {"spec": open_object, "status": open_object}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names.quota_plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": QUOTA_KIND,
                "listKind": f"{QUOTA_KIND}List",
                "plural": names.quota_plural,
                "singular": QUOTA_KIND.lower(),
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


class Stack(Lifecycle):
    """The whole simulated cluster; use ``with Stack(...) as stack:``."""

    def __init__(
        self,
        names: DriverNames,
        inventory: Inventory,
        controller: ControllerSettings,
        *,
        binaries: KubeBinaries | None = None,
        on_progress: Callable[[str], None] = lambda _: None,
        monitor_period: float | None = None,
        consumable_capacity: bool = True,
    ) -> None:
        self.names, self.inventory = names, inventory
        # 1.35's API server has DRAConsumableCapacity off, as the releases before 1.36 ship.
        self._kube_version = "1.36" if consumable_capacity else "1.35"
        self._monitor_period = monitor_period
        self._controller_settings = controller
        self._binaries = binaries
        for name in NEEDED_BINARIES:
            if binaries is not None:
                binaries.path(name)  # ControlPlaneError naming the directory and what it has
        self.real_kubelets = binaries is not None and binaries.has(KUBELET)
        self._progress = on_progress
        self.work_dir: Path | None = None
        self._cluster: FakeCluster | None = None
        self._plugins_stop = threading.Event()
        self._plugins: dict[str, threading.Thread] = {}
        self._plugin_status: dict[str, int] = {}
        self._webhook: Webhook | None = None
        self._controller: Controller | None = None
        self._controller_client: client.ApiClient | None = None

    @property
    def cluster(self) -> FakeCluster:
        """The running harness."""
        if self._cluster is None:
            raise StackError("the simulated cluster is not started")
        return self._cluster

    def start(self, timeout: float | None = None) -> None:
        """Start everything and wait until it serves; on any failure stop what started."""
        if timeout is None:
            timeout = REAL_START_TIMEOUT_SECONDS if self._binaries else START_TIMEOUT_SECONDS
        deadline = time.monotonic() + timeout
        self._stop_on_failure(lambda: self._start(deadline))

    def _start(self, deadline: float) -> None:
        self.work_dir = Path(tempfile.mkdtemp(prefix="gpushare-simulate-", dir="/tmp"))
        inventory_file = self.work_dir / "inventory.yaml"
        inventory_file.write_text(dump_inventory(self.inventory))
        self._progress(f"starting {self.describe()} with {len(self.inventory.nodes)} nodes")
        self._cluster = FakeCluster(
            self.inventory,
            self.work_dir,
            binaries=self._binaries,
            kube_version=self._kube_version,
            real_kubelets=self.real_kubelets,
        )
        try:
            self._cluster.start()
        except ControlPlaneError as exc:
            raise StackError(f"the control plane did not start: {exc}") from exc
        cluster = self._cluster
        cluster.apply(default_device_classes(self.names))
        if cluster.real:
            self._progress("creating the GpuShareQuota CRD")
            cluster.apply([quota_crd(self.names)])
            self._wait(self._quotas_served, "the GpuShareQuota CRD to be Established", deadline)
        kube = KubeClientSettings(kubeconfig=str(cluster.kubeconfig()))
        self._progress("starting the kubelet plugins (gRPC on unix sockets)")
        for node in self.inventory.nodes:
            self._start_plugin(node.name, inventory_file, kube)
        for node in self.inventory.nodes:
            registered = functools.partial(self._plugin_registered, node.name)
            self._wait(registered, f"the kubelet to register the plugin of {node.name}", deadline)
        self._progress("starting the admission webhook (HTTPS)")
        cert_file, key_file = write_self_signed(self.work_dir)
        settings = WebhookSettings(webhook_port=0, tls_cert_file=cert_file, tls_key_file=key_file)
        try:
            self._webhook = serve(self.names, settings, kube)
        except WebhookConfigError as exc:
            raise StackError(f"the webhook did not start: {exc}") from exc
        webhook = self._webhook
        self._wait(lambda: webhook.cache.synced, "the webhook's informers", deadline)
        cards = max((len(node.cards) for node in self.inventory.nodes), default=0)
        # Until every slice is in its cache the webhook cannot know the largest card.
        self._wait(
            lambda: (webhook.cache.limits().most_cards or 0) >= cards,
            "the webhook to see every card",
            deadline,
        )
        ca_bundle = cert_file.read_bytes()
        cluster.apply(webhook_configurations(self.names, webhook.server.port, ca_bundle))
        self._progress("starting the allocation controller")
        self._controller_client = new_api_client(kube, "controller")
        self._controller = Controller(
            self._controller_client, self.names, self._controller_settings, CollectorRegistry()
        )
        self._controller.start()
        controller = self._controller
        self._wait(lambda: controller.leading, "the controller", deadline)

    def describe(self) -> str:
        """Say what plays Kubernetes: the fake API server, or which real components."""
        if self._binaries is None:
            return "the fake API server"
        kubelets = "real kubelets" if self.real_kubelets else f"emulated kubelets (no {KUBELET})"
        return f"a real control plane from {self._binaries.source} with {kubelets}"

    def _start_plugin(self, node: str, inventory_file: Path, kube: KubeClientSettings) -> None:
        dirs = self.cluster.node_dirs(node)
        # The simulated node has HAMi-core installed: an empty stand-in for libvgpu.so, which
        # is only ever mounted into containers, never loaded by the plugin.
        library = dirs.plugins / "libvgpu.so"
        library.touch()
        settings = KubeletPluginSettings(
            node_name=node,
            gpu_inventory=inventory_file,
            plugin_registry_dir=dirs.registry,
            plugin_dir=dirs.plugins / self.names.driver,
            cdi_root=dirs.cdi,
            hami_core_library=library,
        )
        if self._monitor_period is not None:  # else the plugin's own default
            settings = dataclasses.replace(settings, monitor_period=self._monitor_period)
        observability = ObservabilitySettings(metrics_port=-1)

        def serve_node() -> None:
            self._plugin_status[node] = plugin.run(
                self.names, settings, kube, observability, self._plugins_stop
            )

        thread = threading.Thread(target=serve_node, name=f"simulate-plugin-{node}", daemon=True)
        self._plugins[node] = thread
        thread.start()

    def _plugin_registered(self, node: str) -> bool:
        if node in self._plugin_status:
            status = self._plugin_status[node]
            raise StackError(f"the kubelet plugin of {node} exited with status {status}")
        emulated = self.cluster.emulated.get(node)
        if emulated is not None:
            return self.names.driver in emulated.plugins
        # A real kubelet registers the plugin in its own memory; what shows is the plugin's
        # ResourceSlice (and a pod that comes early waits for the registration, retried).
        slices = raw.call(
            client.ResourceV1Api(self.cluster.api).list_resource_slice,
            field_selector=f"spec.nodeName={node},spec.driver={self.names.driver}",
        )
        return bool(slices.get("items"))

    def _quotas_served(self) -> bool:
        name = f"{self.names.quota_plural}.{self.names.driver}"
        extensions = client.ApiextensionsV1Api(self.cluster.api)
        found = raw.call(extensions.read_custom_resource_definition, name)
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def _wait(self, ready: Callable[[], bool], what: str, deadline: float) -> None:
        while not ready():
            if time.monotonic() > deadline:
                raise StackError(f"timed out waiting for {what}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop every component, newest first, and remove the directory; safe to repeat."""
        if self._controller is not None:
            self._controller.stop()
            self._controller = None
        if self._controller_client is not None:
            self._controller_client.close()  # type: ignore[no-untyped-call]  # unannotated upstream
            self._controller_client = None
        if self._webhook is not None:
            self._webhook.stop()
            self._webhook = None
        self._plugins_stop.set()
        for thread in self._plugins.values():
            thread.join(_PLUGIN_JOIN_SECONDS)
        self._plugins.clear()
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
