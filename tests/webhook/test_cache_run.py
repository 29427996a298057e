"""The informer cache and the webhook process against the fake API server."""

from __future__ import annotations

import copy
import gc
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs
from webhook.kit import (
    GATE,
    NAMES,
    SLICES,
    UID,
    claim,
    claim_spec,
    classes,
    decoded_patch,
    from_template,
    pod,
    request,
    response,
    review,
    share_template,
    write_certificate,
)

from dra_driver.controller.view import ClusterView
from dra_driver.k8s.client import new_api_client
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.webhook import run as webhook_run
from dra_driver.webhook.cache import Borrowed, ClusterCache
from dra_driver.webhook.settings import WebhookSettings

T = TypeVar("T")


def wait_for(condition: Callable[[], T | None], timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result is not None and result is not False:
            return result
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as running:
        for obj in [*classes().values(), *SLICES]:
            running.create(copy.deepcopy(obj))
        running.create(share_template())
        yield running
        assert running.internal_errors == []


@pytest.fixture
def cache(server: FakeApiServer) -> Iterator[ClusterCache]:
    cache = ClusterCache(server.api_client(), NAMES)
    cache.start()
    try:
        assert cache.wait_synced(10)
        yield cache
    finally:
        cache.stop()


def test_cache_holds_classes_templates_and_card_limits(cache: ClusterCache) -> None:
    """After syncing, classes, templates and the limits of our published cards are known."""
    assert cache.synced
    assert {NAMES.default_device_class, f"mps.{NAMES.driver}", "gpu.nvidia.com"} <= set(
        cache.device_classes()
    )
    found = cache.template("default", "share")
    assert found is not None
    assert found["spec"]["spec"]["devices"]["requests"][0]["name"] == "gpu"
    assert cache.template("default", "missing") is None
    limits = cache.limits()
    assert (limits.largest_memory, limits.most_cards) == (80 * 2**30, 4)


def _bigger_card_slice() -> dict[str, object]:
    """Return a new node's slice with one card of 141Gi, more than any card so far."""
    bigger = copy.deepcopy(next(s for s in SLICES if s["spec"]["pool"]["name"] == "node-b"))
    bigger["metadata"]["name"] = "node-c-slice-0"
    bigger["spec"]["nodeName"] = bigger["spec"]["pool"]["name"] = "node-c"
    bigger["spec"]["devices"][0]["capacity"]["memory"]["value"] = "141Gi"
    return bigger


def test_limits_follow_a_new_slice(server: FakeApiServer, cache: ClusterCache) -> None:
    """A node publishing a bigger card raises the memory limit without a restart."""
    server.create(_bigger_card_slice())
    wait_for(lambda: cache.limits().largest_memory == 141 * 2**30)


def test_a_cache_on_the_controllers_informers_watches_only_templates(
    server: FakeApiServer,
) -> None:
    """Hosted by the controller, the webhook reads its claims, slices and classes: no own watch."""
    view = ClusterView(server.api_client(component="controller"), NAMES, lambda *_: None)
    borrowed = Borrowed(
        classes=view.classes, claims=view.claims, slices=view.slices, quotas=view.quotas
    )
    cache = ClusterCache(server.api_client(component="webhook"), NAMES, borrowed=borrowed)
    cache.start()
    try:
        assert not cache.wait_synced(0.5), "synced before the borrowed informers listed"
        view.start()
        wait_for(lambda: cache.synced)
        server.create(claim(claim_spec(request(capacity={"cores": "30"})), "mine"))
        found = wait_for(lambda: cache.claim("default", "mine"))
        assert found["spec"]["devices"]["requests"][0]["name"] == "gpu"
        assert (cache.limits().largest_memory, cache.limits().most_cards) == (80 * 2**30, 4)
        server.create(_bigger_card_slice())
        wait_for(lambda: cache.limits().largest_memory == 141 * 2**30)
        assert [informer.name for informer in cache.informers] == ["informer-webhook-templates"]
    finally:
        cache.stop()
        view.stop()
    watches = {
        (agent.split("/")[0], resource)
        for (agent, verb, resource), _ in server.requests_by_agent_verb.items()
        if verb == "watch"
    }
    webhook_watches = {resource for agent, resource in watches if "webhook" in agent}
    assert webhook_watches == {"resourceclaimtemplates"}, watches


def test_live_reads_find_what_the_cache_has_not_seen(server: FakeApiServer) -> None:
    """An unstarted cache knows nothing; a live read finds the template, and None if missing."""
    cache = ClusterCache(server.api_client(), NAMES)
    assert cache.template("default", "share") is None
    found = cache.fetch_template("default", "share")
    assert found is not None
    assert found["metadata"]["name"] == "share"
    assert cache.fetch_template("default", "missing") is None
    assert cache.fetch_claim("default", "missing") is None
    assert not cache.synced


def test_live_read_failure_is_none_not_an_exception(server: FakeApiServer) -> None:
    """When the API server is gone, a live read gives None within its timeout."""
    cache = ClusterCache(server.api_client(), NAMES, live_read_timeout=1.0)
    server.stop()
    assert cache.fetch_template("default", "share") is None


def _settings(tmp_path: Path, port: int = 0) -> WebhookSettings:
    cert_file, key_file, _ = write_certificate(tmp_path)
    return WebhookSettings(webhook_port=port, tls_cert_file=cert_file, tls_key_file=key_file)


def _https(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request(method, path, body=body)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_served_webhook_gates_a_pod_of_a_template_in_the_cluster(
    server: FakeApiServer, tmp_path: Path
) -> None:
    """serve() starts a webhook that, once ready, gates a pod using a template in the cluster."""
    kube = KubeClientSettings(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    registry = CollectorRegistry()
    webhook = webhook_run.serve(NAMES, _settings(tmp_path), kube, registry)
    try:
        port = webhook.server.port
        wait_for(lambda: _https(port, "GET", "/readyz")[0] == 200)
        status, body = _https(port, "POST", "/mutate", review(pod(from_template("share"))))
        assert status == 200
        answer = response(body)
        assert answer["uid"] == UID
        assert decoded_patch(answer) == [
            {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}
        ]
    finally:
        webhook.stop()
    sample = registry.get_sample_value(
        "gpushare_webhook_requests_total",
        {"operation": "mutate", "kind": "Pod", "result": "patched"},
    )
    assert sample == 1


def test_serve_refuses_a_taken_port(server: FakeApiServer, tmp_path: Path) -> None:
    """A port already in use is a configuration error, not a crash."""
    kube = KubeClientSettings(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - the webhook binds the same address
        taken.listen()
        settings = _settings(tmp_path, taken.getsockname()[1])
        with pytest.raises(webhook_run.WebhookConfigError):
            webhook_run.serve(NAMES, settings, kube)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_run_serves_probes_and_stops_cleanly(server: FakeApiServer, tmp_path: Path) -> None:
    """run() serves reviews and probes, freezes its heap once synced, and exits 0 on stop."""
    kube = KubeClientSettings(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    webhook_port, metrics_port = _free_port(), _free_port()
    stop = threading.Event()
    statuses: list[int] = []
    thread = threading.Thread(
        target=lambda: statuses.append(
            webhook_run.run(
                NAMES,
                _settings(tmp_path, webhook_port),
                kube,
                ObservabilitySettings(metrics_port=metrics_port),
                stop=stop,
            )
        )
    )
    with capture_logs() as logs:
        thread.start()
        try:

            def ready() -> bool:
                try:
                    connection = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=5)
                    connection.request("GET", "/readyz")
                    return connection.getresponse().status == 200
                except OSError:
                    return False

            wait_for(ready)
            status, body = _https(webhook_port, "POST", "/validate", b"[]")
            assert (status, body) == (
                400,
                b"malformed AdmissionReview: the body must be a JSON object\n",
            )
            status, body = _https(webhook_port, "POST", "/validate", review(share_template()))
            assert (status, json.loads(body)["response"]["allowed"]) == (200, True)
            wait_for(lambda: any(e["event"] == "webhook.synced" for e in logs))
        finally:
            stop.set()
            thread.join(20)
            gc.unfreeze()  # the test process's heap is not the webhook's to keep
    assert statuses == [0]
    (synced,) = [e for e in logs if e["event"] == "webhook.synced"]
    assert synced["frozen_objects"] > 10_000  # every module and cache loaded by then


def test_run_without_credentials_exits_2(tmp_path: Path) -> None:
    """An unreadable kubeconfig is a configuration error with exit status 2."""
    kube = KubeClientSettings(kubeconfig=str(tmp_path / "missing"))
    status = webhook_run.run(
        NAMES, _settings(tmp_path), kube, ObservabilitySettings(metrics_port=-1), threading.Event()
    )
    assert status == webhook_run.EXIT_CONFIG


def test_a_hung_api_server_costs_one_read_timeout_not_four(tmp_path: Path) -> None:
    """The webhook's client does not retry a timed-out live read: one attempt, not four."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    hung.settimeout(0.1)
    attempts: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                attempts.append(hung.accept()[0])  # never answered
            except OSError:
                continue

    acceptor = threading.Thread(target=accept)
    acceptor.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{hung.getsockname()[1]}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    api_client = new_api_client(
        KubeClientSettings(kubeconfig=str(kubeconfig)), "webhook", retries=False
    )
    try:
        assert ClusterCache(api_client, NAMES).fetch_template("default", "t") is None
        # urllib3's default would open a connection per retry: four attempts, about 8 s.
        assert len(attempts) == 1
    finally:
        done.set()
        acceptor.join()
        for connection in attempts:
            connection.close()
        api_client.close()
        hung.close()
