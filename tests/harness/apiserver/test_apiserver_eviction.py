"""PodDisruptionBudgets and the pods/eviction subresource of the fake API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import ApiError, FakeApiServer
from harness.apiserver.builders import pod, raw, send
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

BUDGETS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


@pytest.fixture
def graceful() -> Iterator[FakeApiServer]:
    with FakeApiServer(graceful_pod_deletion=True) as running:
        yield running
        assert running.internal_errors == []


def budget(name: str, selector: Any = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget"}
    body["metadata"] = {"name": name}
    body["spec"] = {"minAvailable": 1, **spec}
    if selector is not None:
        body["spec"]["selector"] = selector
    return body


def post(server: FakeApiServer, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST a compact JSON body, as ``kubectl create --raw`` would."""
    code, text = send(server, "POST", path, json.dumps(body, separators=(",", ":")).encode())
    return code, json.loads(text) if text else None


def make_budget(
    server: FakeApiServer, name: str, selector: Any, allowed: int, healthy: int | None = None
) -> None:
    """Create a budget (2 pods desired), then write its status as its controller would."""
    code, created = post(server, BUDGETS, budget(name, selector))
    assert code == 201, created
    healthy = 2 + allowed if healthy is None else healthy
    status = {"observedGeneration": 1, "disruptionsAllowed": allowed}
    status.update(desiredHealthy=2, currentHealthy=healthy, expectedPods=healthy)
    with server.api_client() as api:
        policy = client.PolicyV1Api(api)
        policy.patch_namespaced_pod_disruption_budget_status(name, "default", {"status": status})


def running_pod(server: FakeApiServer, name: str, *, ready: bool = True) -> dict[str, Any]:
    """Create, bind and start a pod (labels ``app: demo``) as scheduler and kubelet would."""
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    status = {"phase": "Running", "conditions": [condition]}
    with server.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", pod(name))
        server.bind("default", name, "n1")
        core.patch_namespaced_pod_status(name, "default", {"status": status})
    found = server.get("pods", "default", name)
    assert found is not None
    return found


def evict(server: FakeApiServer, name: str, **delete_options: Any) -> tuple[int, Any]:
    eviction: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction"}
    eviction["metadata"] = {"name": name, "namespace": "default"}
    if delete_options:
        eviction["deleteOptions"] = delete_options
    return post(server, f"/api/v1/namespaces/default/pods/{name}/eviction", eviction)


def allowed_now(server: FakeApiServer, name: str) -> int:
    found = server.get("poddisruptionbudgets", "default", name)
    assert found is not None
    return int(found["status"]["disruptionsAllowed"])


def test_budget_crud_status_write_and_watch(
    server: FakeApiServer, api_client: client.ApiClient
) -> None:
    """A budget is created with zero counts, listed, its status written apart, and watched."""
    code, created = post(server, BUDGETS, budget("b1", {"matchLabels": {"app": "demo"}}))
    assert code == 201
    assert created["metadata"]["generation"] == 1
    assert created["status"] == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    policy = client.PolicyV1Api(api_client)
    listed = policy.list_pod_disruption_budget_for_all_namespaces()
    assert [b.metadata.name for b in listed.items] == ["b1"]
    since = listed.metadata.resource_version
    written = policy.patch_namespaced_pod_disruption_budget_status(
        "b1", "default", {"status": {"observedGeneration": 1, "disruptionsAllowed": 2}}
    )
    assert written.status.disruptions_allowed == 2
    assert int(written.metadata.resource_version) > int(since)
    changed = policy.patch_namespaced_pod_disruption_budget(
        "b1", "default", {"spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 9}}
    )
    assert (changed.metadata.generation, changed.spec.min_available) == (2, "50%")
    assert changed.status.disruptions_allowed == 2  # the main resource keeps the status
    stream = watch.Watch().stream(
        policy.list_namespaced_pod_disruption_budget,
        "default",
        resource_version=since,
        timeout_seconds=2,
    )
    seen = []
    for event in stream:
        seen.append((event["type"], event["raw_object"]["status"]["disruptionsAllowed"]))
        if len(seen) == 2:
            stream.close()
            break
    assert seen == [("MODIFIED", 2), ("MODIFIED", 2)]
    code, deleted, _ = raw(api_client, "DELETE", f"{BUDGETS}/b1")
    assert (code, deleted["status"]) == (200, "Success")
    assert deleted["details"]["kind"] == "poddisruptionbudgets"
    assert policy.list_namespaced_pod_disruption_budget("default").items == []


def test_budget_validation(api_client: client.ApiClient) -> None:
    """Both bounds, a bad percent, a non-object selector and a negative count are refused."""
    both = raw(api_client, "POST", BUDGETS, budget("b1", {}, maxUnavailable=1))
    assert both[0] == 422
    assert "minAvailable and maxUnavailable cannot be both set" in both[1]["message"]
    percent = raw(api_client, "POST", BUDGETS, budget("b2", {}, minAvailable="150%"))
    assert percent[0] == 422
    assert "spec.minAvailable: Invalid value" in percent[1]["message"]
    assert "must not be greater than 100%" in percent[1]["message"]
    assert raw(api_client, "POST", BUDGETS, budget("b3", "app=demo"))[0] == 400
    operator = {"matchExpressions": [{"key": "app", "operator": "Is", "values": ["x"]}]}
    assert raw(api_client, "POST", BUDGETS, budget("b4", operator))[0] == 422
    assert raw(api_client, "POST", BUDGETS, budget("b5", {}, minAvailable="25%"))[0] == 201
    negative = raw(
        api_client, "PATCH", f"{BUDGETS}/b5/status", {"status": {"disruptionsAllowed": -1}},
        "application/merge-patch+json",
    )  # fmt: skip
    assert negative[0] == 422
    assert "status.disruptionsAllowed: Invalid value: -1" in negative[1]["message"]


def test_discovery_serves_budgets_and_pods_eviction(api_client: client.ApiClient) -> None:
    """policy/v1 lists poddisruptionbudgets (pdb, +status); core lists pods/eviction as create."""
    policy = {r.name: r for r in client.PolicyV1Api(api_client).get_api_resources().resources}
    assert policy["poddisruptionbudgets"].short_names == ["pdb"]
    assert policy["poddisruptionbudgets"].kind == "PodDisruptionBudget"
    assert policy["poddisruptionbudgets/status"].verbs == ["get", "patch", "update"]
    core = {r.name: r for r in client.CoreV1Api(api_client).get_api_resources().resources}
    eviction = core["pods/eviction"]
    assert (eviction.group, eviction.version, eviction.kind) == ("policy", "v1", "Eviction")
    assert eviction.verbs == ["create"]


def test_eviction_debits_the_budget_and_deletes_the_pod_gracefully(
    graceful: FakeApiServer,
) -> None:
    """A 201 Success; disruptionsAllowed goes 2 -> 1, the pod is recorded and gracefully marked."""
    running_pod(graceful, "p1")
    make_budget(graceful, "b1", {"matchLabels": {"app": "demo"}}, allowed=2)
    before = graceful.resource_version
    code, answer = evict(graceful, "p1")
    assert (code, answer) == (201, SUCCESS)
    stored = graceful.get("poddisruptionbudgets", "default", "b1")
    assert stored is not None
    assert stored["status"]["disruptionsAllowed"] == 1
    assert list(stored["status"]["disruptedPods"]) == ["p1"]
    assert int(stored["metadata"]["resourceVersion"]) > before
    marked = graceful.get("pods", "default", "p1")
    assert marked is not None  # graceful: the kubelet's grace-0 delete finishes it
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    target = [c for c in marked["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert target[0]["reason"] == "EvictionByEvictionAPI"
    graceful.delete("pods", "default", "p1", {"gracePeriodSeconds": 0})
    assert graceful.get("pods", "default", "p1") is None
    assert graceful.requests[("create", "pods/eviction")] == 1


def test_eviction_is_429_when_the_budget_allows_none(server: FakeApiServer) -> None:
    """disruptionsAllowed 0: 429 TooManyRequests with the DisruptionBudget cause; nothing done."""
    running_pod(server, "p1")
    make_budget(server, "b1", {}, allowed=0)
    code, status = evict(server, "p1")
    assert code == 429
    assert (status["reason"], status["message"]) == ("TooManyRequests", VIOLATION)
    assert status["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget b1 needs 2 healthy pods and has 2 currently",
        }
    ]
    with pytest.raises(ApiError) as refused:  # the same through direct access
        server.evict("default", "p1")
    assert refused.value.code == 429
    found = server.get("pods", "default", "p1")
    assert found is not None
    assert "deletionTimestamp" not in found["metadata"]
    assert allowed_now(server, "b1") == 0


def test_eviction_is_429_while_the_budget_status_trails_its_spec(server: FakeApiServer) -> None:
    """A budget whose observedGeneration is behind its generation refuses, retry after 10 s."""
    running_pod(server, "p1")
    code, _ = post(server, BUDGETS, budget("b1", {}))
    assert code == 201
    code, status = evict(server, "p1")
    assert code == 429
    assert status["details"]["retryAfterSeconds"] == 10
    cause = status["details"]["causes"][0]["message"]
    assert cause == "The disruption budget b1 is still being processed by the server."


def test_eviction_of_a_missing_pod_is_404(server: FakeApiServer) -> None:
    """Evicting a pod that does not exist answers the pod's 404 NotFound."""
    code, status = evict(server, "ghost")
    assert code == 404
    assert status["message"] == 'pods "ghost" not found'


def test_eviction_with_another_uid_is_409_and_leaves_the_pod(server: FakeApiServer) -> None:
    """A UID precondition naming another pod is a 409 Conflict; the pod stays as it was."""
    uid = running_pod(server, "p1")["metadata"]["uid"]
    code, status = evict(server, "p1", preconditions={"uid": "not-the-uid"})
    assert code == 409
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        f'Operation cannot be fulfilled on Pod "p1": the UID in the precondition (not-the-uid) '
        f"does not match the UID in record ({uid}). The object might have been deleted and then "
        "recreated"
    )
    found = server.get("pods", "default", "p1")
    assert found is not None
    assert "deletionTimestamp" not in found["metadata"]
    assert evict(server, "p1", preconditions={"uid": uid})[0] == 201
    assert server.get("pods", "default", "p1") is None


def test_terminating_pod_is_evicted_without_a_budget_check(graceful: FakeApiServer) -> None:
    """A pod already being deleted is evicted though its budget allows none, and not debited."""
    running_pod(graceful, "p1")
    make_budget(graceful, "b1", {"matchLabels": {"app": "demo"}}, allowed=0)
    graceful.delete("pods", "default", "p1")
    code, answer = evict(graceful, "p1")
    assert (code, answer) == (201, SUCCESS)
    assert allowed_now(graceful, "b1") == 0
    found = graceful.get("pods", "default", "p1")
    assert found is not None
    assert found["metadata"]["deletionTimestamp"]


def test_pending_pod_is_evicted_without_a_budget_check(
    server: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    """An unbound (Pending) pod goes even when a budget covering it allows no disruption."""
    core_api.create_namespaced_pod("default", pod("p1"))
    make_budget(server, "b1", {}, allowed=0, healthy=1)
    assert evict(server, "p1")[0] == 201
    assert server.get("pods", "default", "p1") is None


def test_two_covering_budgets_are_500(server: FakeApiServer) -> None:
    """A pod selected by two budgets cannot be evicted: the server's 500 Status, no reason."""
    running_pod(server, "p1")
    make_budget(server, "b1", {}, allowed=1)
    make_budget(server, "b2", {"matchLabels": {"app": "demo"}}, allowed=1)
    code, status = evict(server, "p1")
    assert code == 500
    assert status["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support."
    )
    assert "reason" not in status
    assert (allowed_now(server, "b1"), allowed_now(server, "b2")) == (1, 1)


def test_only_budgets_that_select_the_pod_guard_it(server: FakeApiServer) -> None:
    """No selector and a non-matching selector cover nothing: the pod goes, nothing debited."""
    running_pod(server, "p1")
    make_budget(server, "none", None, allowed=0)
    others = {"key": "app", "operator": "NotIn", "values": ["demo"]}
    make_budget(server, "other", {"matchExpressions": [others]}, allowed=0)
    assert evict(server, "p1")[0] == 201
    assert server.get("pods", "default", "p1") is None


def test_unready_pod_is_spared_the_debit_when_its_budget_is_healthy(
    server: FakeApiServer,
) -> None:
    """An unready pod goes without a debit when currentHealthy >= desiredHealthy > 0."""
    running_pod(server, "p1", ready=False)
    make_budget(server, "b1", {}, allowed=0)
    assert evict(server, "p1")[0] == 201
    assert allowed_now(server, "b1") == 0
    assert server.get("pods", "default", "p1") is None


def test_dry_run_eviction_changes_nothing(server: FakeApiServer) -> None:
    """dryRun=All answers success but neither debits the budget nor deletes the pod."""
    running_pod(server, "p1")
    make_budget(server, "b1", {}, allowed=1)
    before = server.resource_version
    assert evict(server, "p1", dryRun=["All"])[0] == 201
    assert server.resource_version == before
    assert allowed_now(server, "b1") == 1


def test_eviction_answers_only_post(api_client: client.ApiClient) -> None:
    """GET, PUT and DELETE on pods/<name>/eviction are 405, as the create-only subresource is."""
    client.CoreV1Api(api_client).create_namespaced_pod("default", pod("p1"))
    path = "/api/v1/namespaces/default/pods/p1/eviction"
    for method in ("GET", "PUT", "DELETE"):
        code, status, _ = raw(api_client, method, path, {"metadata": {"name": "p1"}})
        assert (method, code, status["reason"]) == (method, 405, "MethodNotAllowed")


def test_eviction_body_must_name_the_pod(server: FakeApiServer, core_api: client.CoreV1Api) -> None:
    """An Eviction naming another pod than the URL is a 400, and the pod stays."""
    core_api.create_namespaced_pod("default", pod("p1"))
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p2"}}
    code, status = post(server, "/api/v1/namespaces/default/pods/p1/eviction", body)
    assert code == 400
    assert status["message"] == "name in URL does not match name in Eviction object"
    assert server.get("pods", "default", "p1") is not None


def test_official_client_lists_budgets_and_evicts(api_client: client.ApiClient) -> None:
    """PolicyV1Api lists budgets everywhere; CoreV1Api.create_namespaced_pod_eviction evicts."""
    core, policy = client.CoreV1Api(api_client), client.PolicyV1Api(api_client)
    core.create_namespaced_pod("default", pod("p1"))
    policy.create_namespaced_pod_disruption_budget("default", budget("b1", {}))
    budgets = policy.list_pod_disruption_budget_for_all_namespaces().items
    assert [(b.metadata.name, b.status.disruptions_allowed) for b in budgets] == [("b1", 0)]
    meta = client.V1ObjectMeta(name="p1", namespace="default")
    answer = core.create_namespaced_pod_eviction("p1", "default", client.V1Eviction(metadata=meta))
    assert answer.kind == "Status"
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("p1", "default")
    assert caught.value.status == 404
