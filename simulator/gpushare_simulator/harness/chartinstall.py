"""The Helm chart installed on a real control plane, its programs running here.

``helm template`` renders the chart; every object but the hooks is created as YAML, as Helm
would create it, so RBAC, the ValidatingAdmissionPolicy, the DeviceClasses and the webhook
configurations are the chart's own. kube-controller-manager then creates the controller's
and the plugins' pods and kube-scheduler binds them; each real kubelet "runs" them in its
fake runtime, and the real program of each runs here (:class:`~.podrun.PodProcess`) with the
pod's env, volumes and a ServiceAccount token bound to that pod.

Two things differ from a cluster, because nothing here may listen anywhere but loopback:
the webhook's TLS is a user's ``webhook.tls.existingSecret`` (a certificate for 127.0.0.1, a
chart option), and the webhook configurations reach the webhook by ``clientConfig.url`` on
127.0.0.1 instead of through its Service; rules, selectors and policies stay as rendered.
"""

from __future__ import annotations

import base64
import functools
import http.client
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Final

import yaml
from kubernetes import client

from dra_driver.k8s import raw
from dra_driver.k8s.objects import Object
from gpushare_simulator.harness.certs import write_self_signed
from gpushare_simulator.harness.controlplane import RealControlPlane, free_ports
from gpushare_simulator.harness.kubeapply import Applier
from gpushare_simulator.harness.podrun import PodProcess

HOOK: Final = "helm.sh/hook"
RESOURCE_POLICY: Final = "helm.sh/resource-policy"
_TLS_SECRET: Final = "webhook-loopback-tls"  # noqa: S105 - a Secret's name
_POD_TIMEOUT_S: Final = 60.0
_RESTART_STOP_S: Final = 5.0
"""How long a restarted program may take to stop after SIGTERM (then SIGKILL)."""


def render(
    helm: Path,
    chart: Path,
    release: str,
    namespace: str,
    values: Object,
    *,
    api_versions: Sequence[str] = (),
) -> list[Object]:
    """Return the chart's objects as ``helm template`` renders them with ``values``.

    ``api_versions``: what the cluster serves (:func:`served_api_versions`), which ``helm
    install`` discovers and ``helm template`` knows only when told.
    """
    flags = [f"--api-versions={version}" for version in api_versions]
    result = subprocess.run(
        [str(helm), "template", release, str(chart), "-n", namespace, "-f", "-", *flags],
        input=yaml.safe_dump(values),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed: {result.stderr.strip()}")
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def served_api_versions(api: client.ApiClient) -> list[str]:
    """Return ``group/version`` and ``group/version/Kind`` of everything the API server serves.

    The chart's ``.Capabilities.APIVersions``, as ``helm install`` sees them by discovery.
    """
    versions = ["v1"] + [f"v1/{r['kind']}" for r in raw.get(api, "/api/v1")["resources"]]
    for group in raw.get(api, "/apis")["groups"]:
        for entry in group["versions"]:
            group_version = entry["groupVersion"]
            resources = raw.get(api, f"/apis/{group_version}")["resources"]
            versions.append(group_version)
            versions.extend(
                f"{group_version}/{r['kind']}" for r in resources if "/" not in r["name"]
            )
    return versions


def _loopback(configuration: Object, port: int) -> Object:
    """Return the webhook configuration calling 127.0.0.1:``port`` instead of its Service."""
    webhooks = []
    for webhook in configuration["webhooks"]:
        config = dict(webhook["clientConfig"])
        service = config.pop("service")
        config["url"] = f"https://127.0.0.1:{port}{service.get('path') or '/'}"
        webhooks.append({**webhook, "clientConfig": config})
    return {**configuration, "webhooks": webhooks}


class ChartInstall:
    """One release of the chart on ``plane``; programs are started per component."""

    def __init__(
        self,
        plane: RealControlPlane,
        helm: Path,
        chart: Path,
        work_dir: Path,
        *,
        inventory: Path,
        release: str = "gpushare",
        namespace: str = "gpushare",
        values: Object | None = None,
    ) -> None:
        self.plane, self.work_dir = plane, work_dir
        self.release, self.namespace = release, namespace
        self.inventory = inventory
        self.api = plane.api_client()
        self.applier = Applier(self.api)
        self.webhook_port = free_ports(1)[0]
        work_dir.mkdir(parents=True, exist_ok=True)
        cert, key = write_self_signed(work_dir, "webhook")
        self._webhook_ca = cert
        self._tls = {"tls.crt": cert.read_bytes(), "tls.key": key.read_bytes()}
        chart_values = {**(values or {})}
        webhook = dict(chart_values.get("webhook") or {})
        webhook["tls"] = {"existingSecret": _TLS_SECRET, "caBundle": cert.read_text()}
        chart_values["webhook"] = webhook
        self.objects = render(
            helm,
            chart,
            release,
            namespace,
            chart_values,
            api_versions=served_api_versions(self.api),
        )
        self.processes: dict[str, PodProcess] = {}

    def hooks(self, when: str) -> list[Object]:
        """Return the rendered hook objects of ``when`` (``post-delete``…)."""
        return [
            o
            for o in self.objects
            if when in (o["metadata"].get("annotations") or {}).get(HOOK, "")
        ]

    def installed(self) -> list[Object]:
        """Return what an install creates: all but the hooks, with webhooks on loopback."""
        return [
            _loopback(obj, self.webhook_port)
            if obj["kind"].endswith("WebhookConfiguration")
            else obj
            for obj in self.objects
            if HOOK not in (obj["metadata"].get("annotations") or {})
        ]

    def install(self) -> None:
        """Create the namespace, the TLS Secret the values name, and the chart's objects."""
        self.applier.create(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}]
        )
        data = {k: base64.b64encode(v).decode() for k, v in self._tls.items()}
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": _TLS_SECRET, "namespace": self.namespace},
            "data": data,
        }
        created = self.applier.create([secret, *self.installed()], self.namespace)
        # A CRD serves its objects only once Established; the controller's informer on one
        # not served yet waits a minute before it asks again.
        for obj in created:
            if obj.get("kind") == "CustomResourceDefinition":
                name = obj["metadata"]["name"]
                self.wait(functools.partial(self._established, name), f"CRD {name} Established")

    def _established(self, crd: str) -> bool:
        found = raw.call(client.ApiextensionsV1Api(self.api).read_custom_resource_definition, crd)
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def uninstall(self) -> None:
        """Stop the programs and delete what the install created, as ``helm uninstall``.

        What the chart marks ``helm.sh/resource-policy: keep`` (the GpuShareQuota CRD) stays.
        """
        for process in self.processes.values():
            process.stop(5.0)
        for obj in reversed(self.installed()):
            if (obj["metadata"].get("annotations") or {}).get(RESOURCE_POLICY) != "keep":
                self.applier.delete(obj, self.namespace)

    def pod(self, component: str, node: str | None = None) -> Object:
        """Wait for the release's pod of ``component`` (on ``node``) and return it."""
        core = client.CoreV1Api(self.api)
        selector = (
            f"app.kubernetes.io/instance={self.release},app.kubernetes.io/component={component}"
        )
        deadline = time.monotonic() + _POD_TIMEOUT_S
        while True:
            pods = raw.call(core.list_namespaced_pod, self.namespace, label_selector=selector)
            items: list[Object] = pods.get("items") or []
            for pod in items:
                where = pod["spec"].get("nodeName")
                deleting = pod["metadata"].get("deletionTimestamp")
                if where and not deleting and (node is None or where == node):
                    return pod
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {component} pod of {self.release} on {node or 'a node'}")
            time.sleep(0.2)

    def run(self, key: str, pod: Object, node: str, overrides: dict[str, str]) -> PodProcess:
        """Start the program of ``pod`` (bound to ``node``) here, as ``key``."""
        process = PodProcess(
            self.api,
            pod,
            url=self.plane.url,
            ca_file=self.plane.layout.pki.ca_cert,
            node_root=self.plane.nodes[node].root,
            kubelet_dir=self.plane.nodes[node].kubelet_dir,
            work_dir=self.work_dir / key,
            overrides={"METRICS_PORT": str(free_ports(1)[0]), **overrides},
        )
        self.processes[key] = process
        process.start()
        return process

    def start_controller(self) -> PodProcess:
        """Run the controller (and the webhook it serves); return once the webhook is ready.

        In a cluster the webhook's Service has no endpoint until the pod is ready; here the
        configurations call the port directly, so a pod created earlier would pass ungated
        (``failurePolicy: Ignore``). Waiting for ``/readyz`` stands in for that.
        """
        pod = self.pod("controller")
        overrides = {"WEBHOOK_PORT": str(self.webhook_port)}
        process = self.run("controller", pod, pod["spec"]["nodeName"], overrides)
        self.wait(self._webhook_ready, "the webhook's /readyz", _POD_TIMEOUT_S)
        return process

    def restart(self) -> None:
        """Stop and start every program, as a rolling update would; return once reviews work.

        A rollout sends reviews only to a ready pod: without the wait, a pod created while the
        new controller's caches sync would pass ungated (see :meth:`start_controller`).
        """
        for process in self.processes.values():
            process.stop(_RESTART_STOP_S)
            process.start()
        self.wait(self._webhook_ready, "the webhook's /readyz", _POD_TIMEOUT_S)

    def _webhook_ready(self) -> bool:
        try:
            return self.webhook_get("/readyz")[0] == HTTPStatus.OK
        except OSError:
            return False

    def webhook_get(self, path: str) -> tuple[int, str]:
        """GET ``path`` (``/readyz``, ``/metrics``) from the webhook; return status and body."""
        context = ssl.create_default_context(cafile=str(self._webhook_ca))
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.webhook_port, context=context, timeout=2
        )
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()

    def start_plugin(self, node: str) -> PodProcess:
        """Run the kubelet plugin of the DaemonSet's pod on ``node``, on the fake cards."""
        pod = self.pod("kubelet-plugin", node)
        root = self.plane.nodes[node].root
        # HAMi-core is "installed" on the node: only ever mounted into containers.
        library = root / "usr" / "local" / "vgpu" / "libvgpu.so"
        library.parent.mkdir(parents=True, exist_ok=True)
        library.touch()
        return self.run(f"plugin-{node}", pod, node, {"GPU_INVENTORY": str(self.inventory)})

    def wait(self, condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
        """Poll ``condition``; on timeout, raise with every program's log tail."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                tails = "\n".join(p.tail() for p in self.processes.values())
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}\n{tails}")
            time.sleep(0.1)
