"""Lifecycle of the fake API server: fast start/stop, no leaks, kubeconfig, process mode, load."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from harness.apiserver.builders import claim, pod, resource_slice
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

ROOT = Path(__file__).resolve().parents[3]


def test_start_and_stop_are_fast_and_leak_nothing() -> None:
    """Start+stop takes well under 2 s and leaves no thread behind and the port closed."""
    before = set(threading.enumerate())
    started = time.perf_counter()
    server = FakeApiServer()
    server.start()
    port = server.port
    with server.api_client() as api_client:
        client.CoreV1Api(api_client).list_namespace()
    server.stop()
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))


def test_stop_ends_open_watches_and_keep_alive_connections() -> None:
    """stop() returns promptly while a client is blocked in a watch, and joins every thread."""
    before = set(threading.enumerate())
    server = FakeApiServer()
    server.start()
    api_client = server.api_client()
    api = client.ResourceV1Api(api_client)
    api.create_resource_slice(resource_slice("s1", "n1"))
    failures: list[BaseException] = []

    def watch_forever() -> None:
        try:
            for _ in watch.Watch().stream(api.list_resource_slice, timeout_seconds=600):
                pass
        except Exception as exc:  # noqa: BLE001 - the watch ends when the server goes away
            failures.append(exc)

    watcher = threading.Thread(target=watch_forever)
    watcher.start()
    time.sleep(0.2)
    started = time.perf_counter()
    server.stop()
    assert time.perf_counter() - started < 2.0
    watcher.join(5)
    api_client.close()
    assert not watcher.is_alive()
    assert set(threading.enumerate()) - before == set()


def test_kubeconfig_works_with_the_client_loader(tmp_path: Path, server: FakeApiServer) -> None:
    """write_kubeconfig() yields a file load_kube_config turns into a working client."""
    path = server.write_kubeconfig(tmp_path / "kube" / "config")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == server.url
    with client.ApiClient(configuration) as api_client:
        names = [n.metadata.name for n in client.CoreV1Api(api_client).list_namespace().items]
    assert "default" in names


def test_python_dash_m_process_mode(tmp_path: Path) -> None:
    """`python -m gpushare_simulator.harness.apiserver` prints its URL, serves, exits 0 on TERM."""
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [sys.executable, "-m", "gpushare_simulator.harness.apiserver", "--port", "0",
         "--kubeconfig", str(kubeconfig), "--kube-version", "1.35"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        assert configuration.host == url
        with client.ApiClient(configuration) as api_client:
            assert client.VersionApi(api_client).get_code().minor == "35"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_works_through_discovery(tmp_path: Path, server: FakeApiServer) -> None:
    """kubectl finds our resources by discovery and reads and deletes them with the kubeconfig."""
    server.create(resource_slice("s1", "n1"))
    server.create(claim("c1"))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def kubectl(*args: str) -> str:
        command = ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert kubectl("get", "resourceslices", "-o", "name") == "resourceslice.resource.k8s.io/s1\n"
    assert "resourceclaims" in kubectl("api-resources", "--api-group=resource.k8s.io")
    kubectl("delete", "resourceclaim", "c1")
    assert server.get("resourceclaims", "default", "c1") is None


def test_concurrent_read_modify_write_loses_no_update(server: FakeApiServer) -> None:
    """Eight threads incrementing one annotation with retry-on-409 end at exactly 8x25."""
    server.create(claim("counter", annotations={"n": "0"}))

    def increment(times: int) -> None:
        with server.api_client() as api_client:
            api = client.ResourceV1Api(api_client)
            for _ in range(times):
                while True:
                    current = api.read_namespaced_resource_claim("counter", "default")
                    value = int(current.metadata.annotations["n"])
                    current.metadata.annotations["n"] = str(value + 1)
                    try:
                        api.replace_namespaced_resource_claim("counter", "default", current)
                        break
                    except ApiException as exc:
                        if exc.status != 409:
                            raise

    threads = [threading.Thread(target=increment, args=(25,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = server.get("resourceclaims", "default", "counter")
    assert final is not None
    assert final["metadata"]["annotations"]["n"] == "200"
    assert server.requests[("update", "resourceclaims")] >= 200


def test_cluster_sized_load(server: FakeApiServer) -> None:
    """100 nodes x 8 cards of slices and 2,000 pods are stored and listed whole (and paged)."""
    for index in range(100):
        server.create(resource_slice(f"node-{index:03d}-gpus", f"node-{index:03d}", 8))
    for index in range(2000):
        server.create(pod(f"pod-{index:04d}"))
    with server.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        started = time.perf_counter()
        pods = core.list_namespaced_pod("default")
        elapsed = time.perf_counter() - started
        assert len(pods.items) == 2000
        slices = client.ResourceV1Api(api_client).list_resource_slice(
            field_selector="spec.nodeName=node-042"
        )
        assert [s.metadata.name for s in slices.items] == ["node-042-gpus"]
        page = core.list_namespaced_pod("default", limit=500)
        assert (len(page.items), page.metadata.remaining_item_count) == (500, 1500)
    print(f"list of 2,000 pods through the client: {elapsed * 1000:.0f} ms")  # noqa: T201
