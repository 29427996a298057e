"""The webhook, the controller and the stock actors together on the harness."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from controller.kit import NAMES, node, slices_of
from controller.test_controller_e2e import bound, claims, gated_pod, running, template
from gpushare_simulator.harness.cluster import FakeCluster
from kubernetes import client
from webhook.kit import write_certificate

from dra_driver.api.classes import default_device_classes
from dra_driver.k8s import objects, raw
from dra_driver.k8s.errors import ApiError
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.nvml.inventory import Inventory
from dra_driver.webhook.run import Webhook, serve
from dra_driver.webhook.settings import WebhookSettings

Object = dict[str, Any]
GATE = NAMES.scheduling_gate


def configurations(port: int, ca_bundle: bytes) -> list[Object]:
    """Return the webhook configurations the chart installs, pointed at a local port."""

    def hook(path: str, rules: list[Object], name: str = "") -> Object:
        return {
            "name": f"{name or path}.{NAMES.driver}",
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}/{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            },
            "rules": rules,
            "failurePolicy": "Ignore",
            "timeoutSeconds": 2,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }

    pods = [
        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
    ]
    claims_rule = [
        {
            "operations": ["CREATE"],
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
        }
    ]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "gpushare"},
            "webhooks": [hook("mutate", pods), hook("mutate", claims_rule, "capacity")],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "gpushare"},
            "webhooks": [hook("validate", claims_rule)],
        },
    ]


@contextmanager
def webhooked(work_dir: Path, kube_version: str = "1.36") -> Iterator[tuple[FakeCluster, Webhook]]:
    """Yield a two-card cluster with our classes, the webhook registered, and the controller.

    Before 1.36 the API server has no consumable capacity, and the cards are published plain,
    as the kubelet plugin does there.
    """
    inventory = Inventory(nodes=(node("node-a", 2),))
    with FakeCluster(inventory, work_dir, kube_version=kube_version, kubelets=False) as cluster:
        shared = kube_version >= "1.36"
        slices = slices_of(inventory.nodes, shared=shared)
        cluster.apply([*default_device_classes(NAMES), *slices])
        cert, key, _ = write_certificate(work_dir)
        webhook = serve(
            NAMES,
            WebhookSettings(webhook_port=0, tls_cert_file=cert, tls_key_file=key),
            KubeClientSettings(kubeconfig=str(cluster.kubeconfig())),
        )
        try:
            assert webhook.cache.wait_synced(10)
            cluster.apply(configurations(webhook.server.port, cert.read_bytes()))
            with running(cluster):
                yield cluster, webhook
        finally:
            webhook.stop()


def create_pod(cluster: FakeCluster, pod: Object) -> Object:
    """Create a pod and return what the API server stored (after admission)."""
    return raw.call(client.CoreV1Api(cluster.api).create_namespaced_pod, "default", pod)


def ungated(name: str, template_name: str) -> Object:
    """Return a pod using the template without any gate: what a user writes."""
    pod = gated_pod(name, template_name)
    del pod["spec"]["schedulingGates"]
    return pod


def test_a_pod_of_ours_is_gated_and_then_placed_by_the_controller(work_dir: Path) -> None:
    """The webhook gates a pod whose template uses our class; the controller places it."""
    with webhooked(work_dir) as (cluster, _):
        cluster.apply([template("share", "30", "5Gi")])
        stored = create_pod(cluster, ungated("p", "share"))
        assert objects.has_scheduling_gate(stored, GATE)
        pod = cluster.wait_for(lambda: bound(cluster, "p"), "the pod to be bound")
        assert not objects.has_scheduling_gate(pod, GATE)
        (claim,) = claims(cluster)
        assert NAMES.finalizer in claim["metadata"]["finalizers"]


def test_an_unrelated_pod_is_left_alone(work_dir: Path) -> None:
    """A pod without claims of ours is stored exactly as written: no gate."""
    with webhooked(work_dir) as (cluster, _):
        stored = create_pod(
            cluster,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "plain"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        )
        assert "schedulingGates" not in stored["spec"]


def test_a_bad_claim_is_refused_at_creation_naming_the_field(work_dir: Path) -> None:
    """cores: 150 is denied by the validating webhook with the field and allowed range."""
    with webhooked(work_dir) as (cluster, _):
        with pytest.raises(ApiError) as refused:
            cluster.apply([template("greedy", "150", "1Gi")])
        message = str(refused.value)
        assert 'admission webhook "validate.gpushare.dra.dev" denied the request' in message
        assert "capacity.requests[cores]" in message
        assert "whole number from 0 to 100" in message


def test_a_webhook_outage_falls_back_to_stock_scheduling(work_dir: Path) -> None:
    """With the webhook gone, pods are created ungated and kube-scheduler allocates first fit."""
    with webhooked(work_dir) as (cluster, webhook):
        cluster.apply([template("share", "30", "5Gi")])
        webhook.stop()
        stored = create_pod(cluster, ungated("stock", "share"))
        assert not objects.has_scheduling_gate(stored, GATE)
        cluster.wait_for(lambda: bound(cluster, "stock"), "the stock-scheduled pod")
        (claim,) = claims(cluster)
        assert NAMES.finalizer not in claim["metadata"]["finalizers"]
        assert claim["status"]["allocation"]


def test_a_share_request_is_refused_where_the_api_server_would_drop_it(work_dir: Path) -> None:
    """On 1.35 without the gate a capacity request is refused before it is silently dropped."""
    with webhooked(work_dir, kube_version="1.35") as (cluster, _):
        with pytest.raises(ApiError) as refused:
            cluster.apply([template("share", "30", "5Gi")])
        message = str(refused.value)
        assert 'admission webhook "capacity.gpushare.dra.dev" denied the request' in message
        assert "DRAConsumableCapacity feature gate is off" in message
        # A whole-card request is what such a cluster can give, and it runs.
        cluster.apply([template("whole"), gated_pod("p", "whole")])
        pod = cluster.wait_for(lambda: bound(cluster, "p"), "the whole-card pod")
        assert pod["spec"]["nodeName"] == "node-a"


def test_the_same_share_request_passes_where_cards_are_shareable(work_dir: Path) -> None:
    """On 1.36 the capacity webhook lets the 30-core template through unchanged."""
    with webhooked(work_dir) as (cluster, _):
        (stored,) = cluster.apply([template("share", "30", "5Gi")])
        requests = stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert requests["capacity"] == {"requests": {"cores": "30", "memory": "5Gi"}}
