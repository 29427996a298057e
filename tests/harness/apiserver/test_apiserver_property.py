"""Property: random write sequences keep resourceVersions ordered and lose no acknowledged write."""

from __future__ import annotations

from typing import Any

from gpushare_simulator.harness.apiserver import FakeApiServer
from harness.apiserver.builders import claim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

NAMES = ("a", "b", "c")
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["create", "update-fresh", "update-stale", "patch", "delete"]),
        st.sampled_from(NAMES),
        st.integers(0, 99),
    ),
    max_size=12,
)


def run(
    api: client.ResourceV1Api, operations: list[tuple[str, str, int]]
) -> list[tuple[str, str, int]]:
    """Apply ``operations``; return the acknowledged writes as (event type, name, rv)."""
    acked: list[tuple[str, str, int]] = []
    seen: dict[str, Any] = {}  # the first version of each object a client read (to go stale)
    for op, name, value in operations:
        try:
            if op == "create":
                obj = api.create_namespaced_resource_claim(
                    "default", claim(name, labels={"v": str(value)})
                )
                seen[name] = obj
                acked.append(("ADDED", name, int(obj.metadata.resource_version)))
            elif op in {"update-fresh", "update-stale"}:
                current = (
                    seen[name]
                    if op == "update-stale" and name in seen
                    else (api.read_namespaced_resource_claim(name, "default"))
                )
                current.metadata.labels = {"v": str(value)}
                before = int(current.metadata.resource_version)
                obj = api.replace_namespaced_resource_claim(name, "default", current)
                if int(obj.metadata.resource_version) != before:
                    acked.append(("MODIFIED", name, int(obj.metadata.resource_version)))
            elif op == "patch":
                before = int(
                    api.read_namespaced_resource_claim(name, "default").metadata.resource_version
                )
                obj = api.patch_namespaced_resource_claim(
                    name, "default", {"metadata": {"labels": {"v": str(value)}}}
                )
                if int(obj.metadata.resource_version) != before:
                    acked.append(("MODIFIED", name, int(obj.metadata.resource_version)))
            else:
                obj = api.delete_namespaced_resource_claim(name, "default")
                seen.pop(name, None)
                acked.append(("DELETED", name, int(obj.metadata.resource_version)))
        except ApiException as exc:
            if exc.status not in {404, 409}:
                raise
    return acked


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPERATIONS)
def test_writes_are_ordered_durable_and_replayed_by_watch(
    operations: list[tuple[str, str, int]],
) -> None:
    """RVs strictly increase, the final state is the last acked write, a watch replays all."""
    with FakeApiServer() as server, server.api_client() as api_client:
        api = client.ResourceV1Api(api_client)
        start = server.resource_version
        acked = run(api, operations)
        versions = [rv for _, _, rv in acked]
        assert versions == sorted(versions)
        assert len(set(versions)) == len(versions)
        for name in NAMES:
            last = [entry for entry in acked if entry[1] == name][-1:]
            stored = server.get("resourceclaims", "default", name)
            if not last or last[0][0] == "DELETED":
                assert stored is None
            else:
                assert stored is not None
                assert int(stored["metadata"]["resourceVersion"]) == last[0][2]
        replayed: list[tuple[str, str, int]] = []
        if acked:
            stream = watch.Watch(return_type="ResourceV1ResourceClaim").stream(
                api.list_namespaced_resource_claim,
                "default",
                resource_version=str(start),
                timeout_seconds=5,
            )
            for event in stream:
                meta = event["raw_object"]["metadata"]
                replayed.append((event["type"], meta["name"], int(meta["resourceVersion"])))
                if len(replayed) == len(acked):
                    break
            stream.close()
        assert replayed == acked
        assert server.internal_errors == []
