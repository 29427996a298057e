"""The asyncio client (``kubernetes.aio``) and leader election against the fake API server."""

from __future__ import annotations

import asyncio
import threading
import time

from gpushare_simulator.harness.apiserver import FakeApiServer
from harness.apiserver.builders import claim, resource_slice
from kubernetes import client
from kubernetes.aio import client as aio_client
from kubernetes.aio import watch as aio_watch
from kubernetes.aio.client.exceptions import ApiException as AioApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock


def aio_configuration(server: FakeApiServer) -> aio_client.Configuration:
    return aio_client.Configuration(host=server.url, api_key={"authorization": "token"})


def test_aio_client_crud_and_conflict(server: FakeApiServer) -> None:
    """kubernetes.aio creates, patches (status) and gets a 409 on a stale replace."""

    async def scenario() -> tuple[str, int]:
        async with aio_client.ApiClient(aio_configuration(server)) as api_client:
            api = aio_client.ResourceV1Api(api_client)
            stale = await api.create_namespaced_resource_claim("default", claim("c1"))
            await api.patch_namespaced_resource_claim(
                "c1", "default", {"metadata": {"labels": {"a": "b"}}}
            )
            try:
                await api.replace_namespaced_resource_claim("c1", "default", stale)
            except AioApiException as exc:
                status = exc.status
            else:
                status = 0
            fetched = await api.read_namespaced_resource_claim("c1", "default")
            return fetched.metadata.labels["a"], status

    assert asyncio.run(scenario()) == ("b", 409)


def test_aio_watch_sees_changes(server: FakeApiServer) -> None:
    """kubernetes.aio.watch streams ADDED then MODIFIED for a slice."""

    async def scenario() -> list[tuple[str, str]]:
        async with aio_client.ApiClient(aio_configuration(server)) as api_client:
            api = aio_client.ResourceV1Api(api_client)
            await api.create_resource_slice(resource_slice("s1", "n1"))

            async def modify() -> None:
                await asyncio.sleep(0.2)
                await api.patch_resource_slice("s1", {"metadata": {"labels": {"a": "b"}}})

            task = asyncio.create_task(modify())
            seen = []
            async with aio_watch.Watch() as watcher:
                async for event in watcher.stream(api.list_resource_slice, timeout_seconds=5):
                    seen.append((event["type"], event["object"].metadata.name))
                    if len(seen) == 2:
                        break
            await task
            return seen

    assert asyncio.run(scenario()) == [("ADDED", "s1"), ("MODIFIED", "s1")]


def test_aio_list_with_field_selector(server: FakeApiServer) -> None:
    """kubernetes.aio lists with a field selector like the sync client."""
    for name, node in (("a", "n1"), ("b", "n2")):
        server.create(resource_slice(name, node))

    async def scenario() -> list[str]:
        async with aio_client.ApiClient(aio_configuration(server)) as api_client:
            api = aio_client.ResourceV1Api(api_client)
            listed = await api.list_resource_slice(field_selector="spec.nodeName=n2")
            return [s.metadata.name for s in listed.items]

    assert asyncio.run(scenario()) == ["b"]


def test_lease_lock_acquires_and_renews(server: FakeApiServer) -> None:
    """The official LeaseLock creates the Lease, renews it by PUT, and stops leading on request."""
    stop = threading.Event()
    leading = threading.Event()

    def lead() -> None:
        leading.set()
        stop.wait(10)
        raise RuntimeError("test asks the elector to stop leading")

    with server.api_client() as api_client:
        lock = LeaseLock("gpushare-controller", "kube-system", "pod-a")
        lock.api_instance = client.CoordinationV1Api(api_client)
        config = electionconfig.Config(
            lock, lease_duration=3, renew_deadline=2, retry_period=1,
            onstarted_leading=lead, onstopped_leading=lambda: None,
        )  # fmt: skip
        elector = threading.Thread(target=leaderelection.LeaderElection(config).run, daemon=True)
        elector.start()
        assert leading.wait(5)
        first = server.get("leases", "kube-system", "gpushare-controller")
        assert first is not None
        assert first["spec"]["holderIdentity"] == "pod-a"
        deadline = time.monotonic() + 5
        renewed = first
        while renewed["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]:
            assert time.monotonic() < deadline, "the lease was never renewed"
            time.sleep(0.1)
            renewed = server.get("leases", "kube-system", "gpushare-controller") or first
        assert renewed["spec"]["renewTime"] != first["spec"]["renewTime"]
        assert server.requests[("update", "leases")] >= 1
        stop.set()
        elector.join(10)
        assert not elector.is_alive()
