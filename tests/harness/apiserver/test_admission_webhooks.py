"""Admission webhooks: the fake API server calls them over HTTPS as kube-apiserver does."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from harness.apiserver.builders import claim, pod, raw
from harness.apiserver.hookserver import Certs, HookServer, allow, deny, make_certs, patch
from kubernetes import client
from kubernetes.client.rest import ApiException

JSON = dict[str, Any]
GATE = "gpushare.dra.dev/allocation"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(Path(tmp_path_factory.mktemp("webhook-certs")))


@pytest.fixture(scope="module")
def hook_server(certs: Certs) -> Iterator[HookServer]:
    running = HookServer(certs)
    yield running
    running.close()


@pytest.fixture
def hooks(hook_server: HookServer) -> HookServer:
    hook_server.reset()
    return hook_server


@pytest.fixture
def admission_api(api_client: client.ApiClient) -> client.AdmissionregistrationV1Api:
    return client.AdmissionregistrationV1Api(api_client)


def webhook(name: str, config: JSON, *, resources: list[str], **extra: Any) -> JSON:
    rule = {
        "operations": extra.pop("operations", ["CREATE"]),
        "apiGroups": extra.pop("groups", [""]),
        "apiVersions": ["v1"],
        "resources": resources,
    }
    if "scope" in extra:
        rule["scope"] = extra.pop("scope")
    return {
        "name": name,
        "clientConfig": config,
        "rules": [rule],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **extra,
    }


def configuration(kind: str, name: str, *webhooks: JSON) -> JSON:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": f"{kind}WebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(webhooks),
    }


def url_config(hooks: HookServer, certs: Certs, path: str) -> JSON:
    return {"url": hooks.url(path), "caBundle": certs.ca_bundle}


def refusal(call: Any, *args: Any) -> tuple[int, JSON]:
    with pytest.raises(ApiException) as caught:
        call(*args)
    return caught.value.status, json.loads(caught.value.body)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_mutating_webhook_patch_is_applied_and_stored(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """A JSONPatch adding a label and a scheduling gate is stored; the review is a full v1 one."""
    ops = [
        {"op": "add", "path": "/metadata/labels/gated", "value": "yes"},
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]},
    ]
    hooks.handlers["/mutate"] = lambda review: patch(review, ops)
    admission_api.create_mutating_webhook_configuration(
        configuration(
            "Mutating",
            "gates",
            webhook(
                "gates.gpushare.dra.dev",
                url_config(hooks, certs, "/mutate"),
                resources=["pods"],
            ),
        )
    )
    created = core_api.create_namespaced_pod("default", pod("p1"))
    stored = server.get("pods", "default", "p1")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"app": "demo", "gated": "yes"}
    assert stored["spec"]["schedulingGates"] == [{"name": GATE}]
    assert created.spec.scheduling_gates[0].name == GATE
    [(path, review)] = hooks.calls
    assert path == "/mutate?timeout=10s"
    assert review["apiVersion"] == "admission.k8s.io/v1"
    request = review["request"]
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["requestKind"] == request["kind"]
    assert (request["name"], request["namespace"], request["operation"]) == (
        "p1",
        "default",
        "CREATE",
    )
    assert request["userInfo"]["username"] == "system:admin"
    assert request["object"]["metadata"]["name"] == "p1"
    assert request["oldObject"] is None
    assert request["dryRun"] is False
    assert request["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert (
        "uid" not in request["object"]["metadata"]
    )  # mutating webhooks run before PrepareForCreate


def test_non_matching_webhooks_are_not_called(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """Other resources, operations, object labels or namespace labels: no call, pod untouched."""
    ops = [{"op": "add", "path": "/metadata/labels/touched", "value": "yes"}]
    hooks.handlers["/m"] = lambda review: patch(review, ops)
    cfg = url_config(hooks, certs, "/m")
    admission_api.create_mutating_webhook_configuration(
        configuration(
            "Mutating",
            "misses",
            webhook("claims.gpushare.dra.dev", cfg, resources=["resourceclaims"]),
            webhook("status.gpushare.dra.dev", cfg, resources=["pods/status"]),
            webhook("updates.gpushare.dra.dev", cfg, resources=["pods"], operations=["UPDATE"]),
            webhook(
                "objects.gpushare.dra.dev",
                cfg,
                resources=["pods"],
                objectSelector={"matchLabels": {"inject": "yes"}},
            ),
            webhook(
                "namespaces.gpushare.dra.dev",
                cfg,
                resources=["*"],
                namespaceSelector={
                    "matchExpressions": [{"key": "team", "operator": "In", "values": ["gpu"]}]
                },
            ),
            webhook("cluster.gpushare.dra.dev", cfg, resources=["*"], scope="Cluster"),
        )
    )
    core_api.create_namespaced_pod("default", pod("p1"))
    assert hooks.calls == []
    stored = server.get("pods", "default", "p1")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"app": "demo"}
    # The same selectors do match once the labels are there, so the misses above were real.
    labelled = pod("p2")
    labelled["metadata"]["labels"]["inject"] = "yes"
    core_api.create_namespaced_pod("default", labelled)
    core_api.create_namespace({"metadata": {"name": "gpu", "labels": {"team": "gpu"}}})
    core_api.create_namespaced_pod("gpu", pod("p3", namespace="gpu"))
    names = [review["request"]["name"] for _, review in hooks.calls]
    # The Namespace matches both the Cluster-scope rule and, by its own labels, the selector.
    assert names == ["p2", "gpu", "gpu", "p3"]
    stored = server.get("pods", "gpu", "p3")
    assert stored is not None
    assert stored["metadata"]["labels"]["touched"] == "yes"


def test_validating_denial_carries_the_webhooks_status(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """A denial answers the webhook's code and reason, the message prefixed by the webhook name."""
    status = {"code": 403, "reason": "Forbidden", "message": "no GPUs on Tuesdays"}
    hooks.handlers["/deny"] = lambda review: deny(review, status)
    admission_api.create_validating_webhook_configuration(
        configuration(
            "Validating",
            "deny",
            webhook("deny.gpushare.dra.dev", url_config(hooks, certs, "/deny"), resources=["pods"]),
        )
    )
    code, body = refusal(core_api.create_namespaced_pod, "default", pod("p1"))
    assert code == 403
    assert body["message"] == (
        'admission webhook "deny.gpushare.dra.dev" denied the request: no GPUs on Tuesdays'
    )
    assert (body["reason"], body["status"], body["code"]) == ("Forbidden", "Failure", 403)
    assert server.get("pods", "default", "p1") is None


def test_denial_without_status_is_a_400_without_explanation(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    resource_api: client.ResourceV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """``allowed: false`` alone is a 400 (ToStatusErr's floor) saying "without explanation"."""
    hooks.handlers["/deny"] = deny
    admission_api.create_validating_webhook_configuration(
        configuration(
            "Validating",
            "claims",
            webhook(
                "claims.gpushare.dra.dev",
                url_config(hooks, certs, "/deny"),
                resources=["resourceclaims"],
                groups=["resource.k8s.io"],
            ),
        )
    )
    code, body = refusal(resource_api.create_namespaced_resource_claim, "default", claim("c1"))
    assert code == 400
    assert body["message"] == (
        'admission webhook "claims.gpushare.dra.dev" denied the request without explanation'
    )
    assert "reason" not in body
    request = hooks.calls[0][1]["request"]
    assert request["resource"] == {
        "group": "resource.k8s.io",
        "version": "v1",
        "resource": "resourceclaims",
    }
    assert "uid" in request["object"]["metadata"]  # validating webhooks see the prepared object


def test_unreachable_webhook_fails_closed_or_open_by_policy(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
) -> None:
    """Fail: 500 "failed calling webhook" with Go's dial error; Ignore: the write goes through."""
    port = closed_port()
    config = {"url": f"https://127.0.0.1:{port}/validate"}
    admission_api.create_validating_webhook_configuration(
        configuration(
            "Validating", "down", webhook("down.gpushare.dra.dev", config, resources=["pods"])
        )
    )
    code, body = refusal(core_api.create_namespaced_pod, "default", pod("p1"))
    reason = (
        'failed calling webhook "down.gpushare.dra.dev": failed to call webhook: Post '
        f'"https://127.0.0.1:{port}/validate?timeout=10s": dial tcp 127.0.0.1:{port}: connect: '
        "connection refused"
    )
    assert code == 500
    assert body["message"] == f"Internal error occurred: {reason}"
    assert body["reason"] == "InternalError"
    assert body["details"] == {"causes": [{"message": reason}]}
    admission_api.patch_validating_webhook_configuration(
        "down", [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]
    )
    core_api.create_namespaced_pod("default", pod("p1"))
    assert server.get("pods", "default", "p1") is not None


def test_timeout_seconds_is_honoured(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """A webhook slower than timeoutSeconds=1 fails the call after about a second."""

    def slow(review: JSON) -> JSON:
        hooks.sleep(5)
        return allow(review)

    hooks.handlers["/slow"] = slow
    admission_api.create_validating_webhook_configuration(
        configuration(
            "Validating",
            "slow",
            webhook(
                "slow.gpushare.dra.dev",
                url_config(hooks, certs, "/slow"),
                resources=["pods"],
                timeoutSeconds=1,
            ),
        )
    )
    started = time.monotonic()
    code, body = refusal(core_api.create_namespaced_pod, "default", pod("p1"))
    elapsed = time.monotonic() - started
    assert code == 500
    assert body["message"].endswith(
        f'Post "{hooks.url("/slow")}?timeout=1s": context deadline exceeded'
    )
    assert 0.9 < elapsed < 3.0


def test_certificates_are_verified_against_ca_bundle_and_host(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """A foreign caBundle, or a host the certificate does not name, is a call failure."""
    wrong_ca = {"url": hooks.url("/v"), "caBundle": certs.other_ca_bundle}
    admission_api.create_validating_webhook_configuration(
        configuration(
            "Validating", "tls", webhook("ca.gpushare.dra.dev", wrong_ca, resources=["pods"])
        )
    )
    code, body = refusal(core_api.create_namespaced_pod, "default", pod("p1"))
    assert code == 500
    assert body["message"].endswith(
        "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    )
    server.service_urls[("webhooks", "other")] = hooks.url("")
    other = {"service": {"namespace": "webhooks", "name": "other"}, "caBundle": certs.ca_bundle}
    admission_api.replace_validating_webhook_configuration(
        "tls",
        configuration(
            "Validating", "tls", webhook("host.gpushare.dra.dev", other, resources=["pods"])
        ),
    )
    code, body = refusal(core_api.create_namespaced_pod, "default", pod("p1"))
    assert code == 500
    assert body["message"] == (
        'Internal error occurred: failed calling webhook "host.gpushare.dra.dev": failed to call '
        'webhook: Post "https://other.webhooks.svc:443/?timeout=10s": tls: failed to verify '
        "certificate: x509: certificate is valid for localhost, hook.webhooks.svc, not "
        "other.webhooks.svc"
    )
    assert hooks.calls == []


def test_service_webhooks_use_the_service_mapping(
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """``clientConfig.service`` reaches the mapped address; unmapped, it is "service not found"."""
    service = {"namespace": "webhooks", "name": "hook", "path": "/validate", "port": 8443}
    cfg = {"service": service, "caBundle": certs.ca_bundle}
    urls = {("webhooks", "hook"): hooks.url("")}
    with FakeApiServer(service_urls=urls) as mapped, mapped.api_client() as api:
        client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(
            configuration(
                "Validating", "svc", webhook("svc.gpushare.dra.dev", cfg, resources=["pods"])
            )
        )
        client.CoreV1Api(api).create_namespaced_pod("default", pod("p1"))
        assert hooks.calls[0][0] == "/validate?timeout=10s"
        assert mapped.internal_errors == []
    admission_api.create_validating_webhook_configuration(
        configuration("Validating", "svc", webhook("svc.gpushare.dra.dev", cfg, resources=["pods"]))
    )
    code, body = refusal(core_api.create_namespaced_pod, "default", pod("p1"))
    assert code == 500
    assert body["message"] == (
        'Internal error occurred: failed calling webhook "svc.gpushare.dra.dev": failed to call '
        'webhook: Post "https://hook.webhooks.svc:8443/validate?timeout=10s": service "hook" not '
        "found"
    )


def test_update_and_delete_reviews_carry_the_old_object(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """UPDATE (a patch) and DELETE reviews name the stored object as oldObject; dryRun is passed."""
    server.create(pod("p1"))
    hooks.handlers["/v"] = lambda review: allow(review, warnings=["gpus are shared"])
    admission_api.create_validating_webhook_configuration(
        configuration(
            "Validating",
            "changes",
            webhook(
                "changes.gpushare.dra.dev",
                url_config(hooks, certs, "/v"),
                resources=["pods"],
                operations=["UPDATE", "DELETE"],
            ),
        )
    )
    status, _, headers = raw(
        core_api.api_client,
        "PATCH",
        "/api/v1/namespaces/default/pods/p1?dryRun=All",
        {"metadata": {"labels": {"app": "new"}}},
        "application/merge-patch+json",
    )
    assert status == 200
    assert headers["Warning"] == '299 - "gpus are shared"'
    update = hooks.calls[0][1]["request"]
    assert update["operation"] == "UPDATE"
    assert update["object"]["metadata"]["labels"] == {"app": "new"}
    assert update["oldObject"]["metadata"]["labels"] == {"app": "demo"}
    assert (update["dryRun"], update["options"]["kind"]) == (True, "UpdateOptions")
    assert update["options"]["dryRun"] == ["All"]
    hooks.handlers["/v"] = deny
    code, body = refusal(core_api.delete_namespaced_pod, "p1", "default")
    assert code == 400
    assert body["message"] == (
        'admission webhook "changes.gpushare.dra.dev" denied the request without explanation'
    )
    delete = hooks.calls[1][1]["request"]
    assert (delete["operation"], delete["object"]) == ("DELETE", None)
    assert delete["oldObject"]["metadata"]["name"] == "p1"
    assert delete["options"]["kind"] == "DeleteOptions"
    assert server.get("pods", "default", "p1") is not None


def test_mutation_order_reinvocation_and_invalid_patches(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """Configurations run by name, each seeing the last; IfNeeded reinvokes; bad results are 422."""
    hooks.handlers["/first"] = allow
    hooks.handlers["/second"] = lambda review: patch(
        review, [{"op": "add", "path": "/metadata/labels/second", "value": "x"}]
    )
    for name, path, extra in (
        ("b-second", "/second", {}),
        ("a-first", "/first", {"reinvocationPolicy": "IfNeeded"}),
    ):
        admission_api.create_mutating_webhook_configuration(
            configuration(
                "Mutating",
                name,
                webhook(
                    f"{name}.gpushare.dra.dev",
                    url_config(hooks, certs, path),
                    resources=["pods"],
                    **extra,
                ),
            )
        )
    core_api.create_namespaced_pod("default", pod("p1"))
    assert hooks.paths() == ["/first", "/second", "/first"]
    assert hooks.calls[2][1]["request"]["object"]["metadata"]["labels"]["second"] == "x"
    hooks.reset()
    hooks.handlers["/second"] = lambda review: patch(
        review, [{"op": "add", "path": "/metadata/labels/second", "value": "not valid!"}]
    )
    code, body = refusal(core_api.create_namespaced_pod, "default", pod("p2"))
    assert code == 422
    assert body["message"].startswith(
        'Pod "p2" is invalid: metadata.labels: Invalid value: "not valid!": '
    )


def test_webhook_configurations_are_validated_and_defaulted(
    api_client: client.ApiClient,
    admission_api: client.AdmissionregistrationV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """admissionReviewVersions and sideEffects are checked as the server does; defaults are set."""
    good = webhook("ok.gpushare.dra.dev", url_config(hooks, certs, "/x"), resources=["*"])
    for field, value, message in (
        (
            "admissionReviewVersions",
            ["v2"],
            'webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include '
            "at least one of v1, v1beta1",
        ),
        (
            "admissionReviewVersions",
            None,
            "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
        ),
        (
            "sideEffects",
            "Some",
            'webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", '
            '"NoneOnDryRun"',
        ),
        (
            "timeoutSeconds",
            31,
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 "
            "and 30 seconds",
        ),
    ):
        bad = {k: v for k, v in good.items() if k != field} | ({field: value} if value else {})
        code, body, _ = raw(
            api_client,
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            configuration("Validating", "bad", bad),
        )
        assert code == 422
        kind = "ValidatingWebhookConfiguration.admissionregistration.k8s.io"
        assert body["message"] == f'{kind} "bad" is invalid: {message}'
    stored = admission_api.create_mutating_webhook_configuration(
        configuration("Mutating", "defaults", good)
    ).webhooks[0]
    assert (stored.failure_policy, stored.match_policy, stored.timeout_seconds) == (
        "Fail",
        "Equivalent",
        10,
    )
    assert stored.reinvocation_policy == "Never"
    assert stored.rules[0].scope == "*"
    assert hooks.calls == []  # webhook configurations are never sent to webhooks


def test_match_conditions_are_refused_not_guessed(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """A matching webhook with CEL matchConditions fails the write with a 500 saying so."""
    conditions = [{"name": "always", "expression": "true"}]
    admission_api.create_validating_webhook_configuration(
        configuration(
            "Validating",
            "cel",
            webhook(
                "cel.gpushare.dra.dev",
                url_config(hooks, certs, "/x"),
                resources=["pods"],
                matchConditions=conditions,
            ),
        )
    )
    code, body = refusal(core_api.create_namespaced_pod, "default", pod("p1"))
    assert code == 500
    assert "matchConditions" in body["message"]
    assert hooks.calls == []


def test_subresource_rules_match_only_their_subresource(
    server: FakeApiServer,
    admission_api: client.AdmissionregistrationV1Api,
    core_api: client.CoreV1Api,
    hooks: HookServer,
    certs: Certs,
) -> None:
    """A ``pods/status`` rule sees status writes (subResource set) and not writes to the pod."""
    server.create(pod("p1"))
    admission_api.create_validating_webhook_configuration(
        configuration(
            "Validating",
            "status",
            webhook(
                "status.gpushare.dra.dev",
                url_config(hooks, certs, "/status"),
                resources=["pods/status"],
                operations=["*"],
            ),
        )
    )
    core_api.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"app": "x"}}})
    assert hooks.calls == []
    core_api.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Running"}})
    [(_, review)] = hooks.calls
    request = review["request"]
    assert (request["operation"], request["subResource"]) == ("UPDATE", "status")
    assert request["requestSubResource"] == "status"
    assert request["object"]["status"]["phase"] == "Running"
    assert request["oldObject"]["status"]["phase"] == "Pending"
