"""What the simulation does to the cluster: what a user does with kubectl, and Job completion.

Creating objects (a refusal is an answer, not an error), deleting pods at once, reporting a
Job's pod as finished (its kubelet would), namespaces, and cleaning a namespace up until its
claims are released and its GpuShareQuotas are gone. Transport and server errors raise
:class:`SimulationError`.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any, Final

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import AlreadyExistsError, ApiError, NotFoundError, RetryableError
from dra_driver.k8s.objects import Object
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.simulate.observe import Observer

SETTLE_SECONDS: Final = 20.0
CLEANUP_SECONDS: Final = 30.0
POLL_SECONDS: Final = 0.05
_FINISHED: Final = ("Running", "Succeeded", "Failed")


class SimulationError(Exception):
    """The simulated cluster failed (not an expectation: the simulation could not go on)."""


def poll(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; return whether it held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


def wait(condition: Callable[[], bool], what: str, timeout: float = SETTLE_SECONDS) -> None:
    """Poll ``condition`` until it holds; raise :class:`SimulationError` after ``timeout``."""
    if not poll(condition, timeout):
        raise SimulationError(f"timed out after {timeout:g} s waiting for {what}")


def _exists(read: Callable[..., Any], *args: str) -> bool:
    try:
        raw.call(read, *args)
    except NotFoundError:
        return False
    return True


class ClusterOps:
    """Acts on a running simulated cluster."""

    def __init__(self, cluster: FakeCluster, names: DriverNames) -> None:
        self._cluster = cluster
        self._core = client.CoreV1Api(cluster.api)
        self._resource = client.ResourceV1Api(cluster.api)
        self._custom = client.CustomObjectsApi(cluster.api)
        self._names = names
        self.observer = Observer(cluster, names)

    @property
    def cluster(self) -> FakeCluster:
        """The cluster acted on (its kubeconfig lets a tool such as ``status`` read it)."""
        return self._cluster

    def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` unless it exists; on a real control plane, wait for its SA."""
        if not _exists(self._core.read_namespace, namespace):
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            with contextlib.suppress(AlreadyExistsError):  # made meanwhile: as good
                raw.call(self._core.create_namespace, body)
        if self._cluster.real:
            # kube-apiserver refuses pods until kube-controller-manager made the default SA.
            read = self._core.read_namespaced_service_account
            wait(
                functools.partial(_exists, read, "default", namespace),
                f"the default ServiceAccount of {namespace}",
            )

    def read_pod(self, namespace: str, name: str) -> Object | None:
        """Return the pod, or ``None`` when it does not exist."""
        try:
            return dict(raw.call(self._core.read_namespaced_pod, name, namespace))
        except NotFoundError:
            return None

    def has_phase(self, namespace: str, name: str, phase: str) -> bool:
        """Whether the pod exists and is in ``phase``."""
        pod = self.read_pod(namespace, name)
        return pod is not None and objects.status(pod).get("phase") == phase

    def settled(self, namespace: str, name: str) -> bool:
        """Whether the pod runs, finished, or waits with a reason (or is gone)."""
        pod = self.read_pod(namespace, name)
        if pod is None or objects.status(pod).get("phase") in _FINISHED:
            return True
        fact = self.observer.snapshot([namespace], {}).pod(name)
        return fact is not None and fact.reason is not None

    def create(self, document: Object, namespace: str) -> str | None:
        """Create one object; return the API server's refusal, or ``None`` when created."""
        try:
            self._cluster.apply([document], namespace)
        except RetryableError as exc:
            raise SimulationError(f"the API server failed: {exc}") from exc
        except ApiError as exc:
            if exc.status is None:
                raise SimulationError(f"the API server failed: {exc}") from exc
            return exc.message
        return None

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete the pod at once (grace period 0) and wait until it is gone."""
        try:
            raw.call(self._core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)
        except NotFoundError:
            return
        wait(lambda: self.read_pod(namespace, name) is None, f"pod {name} to go")

    def complete_pod(self, namespace: str, name: str) -> None:
        """Report the pod's containers as exited with status 0, and wait for the phase."""
        pod = self.read_pod(namespace, name)
        if pod is None or not pod["spec"].get("nodeName"):
            raise SimulationError(f"pod {name} cannot complete: it is not running")
        self._cluster.kubelets[pod["spec"]["nodeName"]].complete_pod(namespace, name)
        wait(lambda: self.has_phase(namespace, name, "Succeeded"), f"pod {name} to complete")

    def clean(self, namespace: str) -> None:
        """Delete the namespace's pods, claims and quotas; wait until the claims are released."""
        for pod in raw.call(self._core.list_namespaced_pod, namespace)["items"]:
            self.delete_pod(namespace, pod["metadata"]["name"])
        claims = self._resource
        for claim in raw.call(claims.list_namespaced_resource_claim, namespace)["items"]:
            with contextlib.suppress(NotFoundError):  # its pod's deletion took it already
                raw.call(
                    claims.delete_namespaced_resource_claim, claim["metadata"]["name"], namespace
                )

        def released() -> bool:
            return not raw.call(claims.list_namespaced_resource_claim, namespace)["items"]

        wait(released, f"the claims of {namespace} to be released", CLEANUP_SECONDS)
        self._delete_quotas(namespace)

    def _delete_quotas(self, namespace: str) -> None:
        """Delete the namespace's GpuShareQuotas, where the API server serves the kind."""
        group, version = self._names.quota_group_version
        plural = self._names.quota_plural
        try:
            listed = raw.call(
                self._custom.list_namespaced_custom_object, group, version, namespace, plural
            )
        except NotFoundError:
            return
        for quota in listed.get("items") or []:
            with contextlib.suppress(NotFoundError):
                raw.call(
                    self._custom.delete_namespaced_custom_object,
                    group,
                    version,
                    namespace,
                    plural,
                    objects.name(quota),
                )
