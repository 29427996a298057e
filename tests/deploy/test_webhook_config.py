"""The webhook configurations, Service and TLS are what docs/webhook.md asks of the chart."""

from __future__ import annotations

import base64
import datetime
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cel
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from deploy.chartkit import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    HelmError,
    Rendered,
    containers,
    env_of,
    render,
    validate,
    webhook,
)
from webhook import kit

from dra_driver.webhook.admission import Admission

SERVICE = "gpushare-webhook"
DNS_NAMES = [f"{SERVICE}.{NAMESPACE}.svc", f"{SERVICE}.{NAMESPACE}.svc.cluster.local"]


@pytest.mark.parametrize(
    ("kind", "name", "path", "rule"),
    [
        (
            "ValidatingWebhookConfiguration",
            "validate.gpushare.dra.dev",
            "/validate",
            {
                "apiGroups": ["resource.k8s.io"],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["resourceclaims", "resourceclaimtemplates"],
                "scope": "Namespaced",
            },
        ),
        (
            "MutatingWebhookConfiguration",
            "gate.gpushare.dra.dev",
            "/mutate",
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            },
        ),
    ],
)
def test_webhook_configuration_follows_the_documented_contract(
    rendered: Callable[[str], Rendered], kind: str, name: str, path: str, rule: dict[str, Any]
) -> None:
    """Ignore, 5 s, no side effects, v1 reviews, CREATE only, service path, selectors."""
    hook = webhook(rendered("defaults"), kind)
    assert hook["name"] == name
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] == 5
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["rules"] == [rule]
    assert hook["clientConfig"]["service"] == {
        "name": SERVICE,
        "namespace": NAMESPACE,
        "path": path,
        "port": 443,
    }
    (excluded,) = hook["namespaceSelector"]["matchExpressions"]
    assert excluded["key"] == "kubernetes.io/metadata.name"
    assert excluded["operator"] == "NotIn"
    assert set(excluded["values"]) == {NAMESPACE, "kube-system"}
    assert hook["objectSelector"]["matchExpressions"] == [
        {"key": "gpushare.dra.dev/webhook", "operator": "NotIn", "values": ["disabled"]}
    ]
    if kind == "MutatingWebhookConfiguration":
        assert hook["reinvocationPolicy"] == "IfNeeded"


def test_chart_pods_are_never_sent_to_the_webhook(rendered: Callable[[str], Rendered]) -> None:
    """Every pod template of the chart carries the opt-out label the objectSelector excludes."""
    r = rendered("all-options")
    workloads = r.of_kind("Deployment") + r.of_kind("DaemonSet") + r.of_kind("Job")
    assert len(workloads) == 4  # controller, plugin, HAMi-core installer, uninstall cleanup
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert labels["gpushare.dra.dev/webhook"] == "disabled"


def test_webhook_service_reaches_the_controller_webhook_port(
    rendered: Callable[[str], Rendered],
) -> None:
    """Service 443 -> the controller's named port `webhook`, which is WEBHOOK_PORT."""
    r = rendered("defaults")
    service = r.one("Service", SERVICE)
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (443, "webhook")
    deployment = r.one("Deployment")
    assert service["spec"]["selector"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    container = containers(deployment)[0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = env_of(container)
    assert env["WEBHOOK_ENABLED"] == "true"
    assert str(ports["webhook"]) == env["WEBHOOK_PORT"] == "9443"
    probe = container["readinessProbe"]["httpGet"]
    assert probe == {"path": "/readyz", "port": "webhook", "scheme": "HTTPS"}


def mounted_secret(r: Rendered) -> str:
    """Return the Secret mounted where TLS_CERT_FILE and TLS_KEY_FILE point (a dir mount)."""
    deployment = r.one("Deployment")
    container = containers(deployment)[0]
    env = env_of(container)
    directory = str(Path(env["TLS_CERT_FILE"]).parent)
    assert str(Path(env["TLS_KEY_FILE"]).parent) == directory
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert "subPath" not in mount  # rotations must reach the pod
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    return str(volume["secret"]["secretName"])


def decode(data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(data[key])


def test_self_signed_pair_is_consistent(rendered: Callable[[str], Rendered]) -> None:
    """caBundle is the Secret's CA, which signed a serving certificate for the Service names."""
    r = rendered("defaults")
    secret = r.one("Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert mounted_secret(r) == secret["metadata"]["name"]
    ca_pem = decode(secret["data"], "ca.crt")
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        assert base64.b64decode(webhook(r, kind)["clientConfig"]["caBundle"]) == ca_pem
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(decode(secret["data"], "tls.crt"))
    assert cert.issuer == ca.subject
    public_key = ca.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey)
    if isinstance(public_key, rsa.RSAPublicKey):
        assert cert.signature_hash_algorithm is not None
        public_key.verify(
            cert.signature,
            cert.tbs_certificate_bytes,
            padding.PKCS1v15(),
            cert.signature_hash_algorithm,
        )
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(names.get_values_for_type(x509.DNSName)) == sorted(DNS_NAMES)
    assert b"PRIVATE KEY" in decode(secret["data"], "tls.key")


def test_self_signed_pair_is_kept_across_upgrades() -> None:
    """The template reads the existing Secret (lookup) and reuses its pair before generating."""
    template = (CHART / "templates" / "webhook.yaml").read_text()
    lookup = template.index('lookup "v1" "Secret" .Release.Namespace $secretName')
    generate = template.index("genCA")
    assert lookup < generate
    assert '$caBundle = index $existing.data "ca.crt"' in template


def test_cert_manager_issues_and_injects(rendered: Callable[[str], Rendered]) -> None:
    """With cert-manager: a Certificate into the mounted Secret, CA injected, no caBundle."""
    r = rendered("cert-manager")
    assert r.of_kind("Secret") == []
    certificate = r.one("Certificate", SERVICE)
    assert certificate["metadata"]["namespace"] == NAMESPACE
    assert certificate["spec"]["secretName"] == mounted_secret(r)
    assert certificate["spec"]["dnsNames"] == DNS_NAMES
    issuer = r.one("Issuer")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
    }
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        config = r.one(kind)
        assert config["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{SERVICE}"
        }
        assert "caBundle" not in webhook(r, kind)["clientConfig"]


def test_cert_manager_can_use_an_existing_issuer(rendered: Callable[[str], Rendered]) -> None:
    """issuerRef names the user's (Cluster)Issuer; the chart then creates none."""
    r = rendered("all-options")
    assert r.of_kind("Issuer") == []
    assert r.one("Certificate")["spec"]["issuerRef"] == {"name": "ca", "kind": "ClusterIssuer"}


def test_webhook_off_removes_every_webhook_piece(rendered: Callable[[str], Rendered]) -> None:
    """webhook.enabled=false: no webhook pieces; the controller still knows the backend."""
    r = rendered("webhook-off")
    kinds = {o["kind"] for o in r.objects}
    assert not kinds & {
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "Secret",
        "Certificate",
    }
    assert SERVICE not in r.names("Service")
    container = containers(r.one("Deployment"))[0]
    env = env_of(container)
    assert env["WEBHOOK_ENABLED"] == "false"
    assert env["BACKEND"] == "hami-core"  # it holds pods sharing a hami-core claim
    assert "TLS_CERT_FILE" not in env
    assert "webhook" not in {p["name"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_gate_off_keeps_validation_and_the_capacity_check_only(helm: Path) -> None:
    """gate.enabled=false drops the pod gate; claims are still validated and capacity-checked."""
    r = render(helm, {"gate": {"enabled": False}})
    (mutating,) = r.of_kind("MutatingWebhookConfiguration")
    assert [h["name"] for h in mutating["webhooks"]] == ["capacity.gpushare.dra.dev"]
    assert webhook(r, "ValidatingWebhookConfiguration")["name"] == "validate.gpushare.dra.dev"


def test_the_capacity_webhook_sees_claims_before_the_api_server_drops_fields(helm: Path) -> None:
    """capacity.<driver> is a mutating hook on claim and template creates, sent to /mutate."""
    hook = webhook(render(helm, {}), "MutatingWebhookConfiguration", "capacity.")
    (rule,) = hook["rules"]
    assert rule["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    assert (rule["apiGroups"], rule["operations"]) == (["resource.k8s.io"], ["CREATE"])
    assert hook["clientConfig"]["service"]["path"] == "/mutate"
    assert hook["reinvocationPolicy"] == "Never"  # nothing another webhook adds needs it again


def test_webhook_policy_values_reach_both_configurations(helm: Path) -> None:
    """failurePolicy, timeout and extra excluded namespaces are configurable, for both hooks."""
    r = render(
        helm,
        {"webhook": {"failurePolicy": "Fail", "timeoutSeconds": 3, "excludeNamespaces": ["ops"]}},
    )
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        hook = webhook(r, kind)
        assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Fail", 3)
        values = hook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert set(values) == {NAMESPACE, "kube-system", "ops"}


# Pods as kube-apiserver would send them, each with what the webhook answers for it.
POD_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "no claims": (kit.pod(), "allowed"),
    "empty resourceClaims": (kit.pod(resourceClaims=[]), "allowed"),
    "a container names a claim the pod lacks": (
        kit.pod(containers=[{"name": "c", "image": "i", "resources": {"claims": [{"name": "x"}]}}]),
        "allowed",
    ),
    "bound to a node": (kit.pod(nodeName="node-a"), "allowed"),
    "another scheduling gate": (kit.pod(gates=["other.example.com/gate"]), "allowed"),
    "a claim template of ours": (kit.pod(kit.from_template("share")), "patched"),
    "two containers sharing one hami-core request": (
        kit.pod(
            kit.from_template("share"),
            containers=[
                {"name": n, "image": "i", "resources": {"claims": [{"name": "gpu"}]}}
                for n in ("a", "b")
            ],
        ),
        "denied",
    ),
    "a claim nobody can find": (kit.pod(kit.from_claim("missing")), "allowed"),
    # Bound pods are never gated, but still refused: the condition must not skip nodeName.
    "bound to a node, two containers sharing one hami-core request": (
        kit.pod(
            kit.from_template("share"),
            nodeName="node-a",
            containers=[
                {"name": n, "image": "i", "resources": {"claims": [{"name": "gpu"}]}}
                for n in ("a", "b")
            ],
        ),
        "denied",
    ),
}


def pod_condition(r: Rendered) -> str:
    (condition,) = webhook(r, "MutatingWebhookConfiguration")["matchConditions"]
    assert condition["name"] == "pod-has-resource-claims"
    return str(condition["expression"])


@pytest.mark.parametrize("case", sorted(POD_CASES))
def test_pod_match_condition_never_hides_a_pod_the_webhook_acts_on(
    rendered: Callable[[str], Rendered], case: str
) -> None:
    """Pods the CEL condition keeps away are ones the webhook would allow unchanged, unread."""
    expression = pod_condition(rendered("defaults"))
    pod, expected = POD_CASES[case]
    sent = cel.evaluate(expression, {"object": pod})
    cluster = kit.FakeCluster(templates={("default", "share"): kit.share_template()})
    outcome = Admission(kit.NAMES, cluster).mutate(kit.review(pod))
    assert outcome.result == expected
    if not sent:
        assert outcome.result == "allowed"
        assert "patch" not in kit.response(outcome.body)
        assert cluster.fetched == []  # nothing the webhook looked up either
    else:
        assert pod["spec"]["resourceClaims"]


def test_pod_match_condition_sends_exactly_the_pods_with_claims(
    rendered: Callable[[str], Rendered],
) -> None:
    """Every pod with spec.resourceClaims is sent, every other pod is not (not vacuous)."""
    expression = pod_condition(rendered("custom-driver-name"))
    sent = {
        case for case, (pod, _) in POD_CASES.items() if cel.evaluate(expression, {"object": pod})
    }
    with_claims = {
        case for case, (pod, _) in POD_CASES.items() if pod["spec"].get("resourceClaims")
    }
    assert sent == with_claims
    acted = {case for case, (_, expected) in POD_CASES.items() if expected != "allowed"}
    assert acted
    assert acted <= sent


def claim_conditions(r: Rendered) -> list[str]:
    """Return the claim webhooks' match conditions (validating, then capacity)."""
    expressions = []
    for hook in (
        webhook(r, "ValidatingWebhookConfiguration"),
        webhook(r, "MutatingWebhookConfiguration", "capacity."),
    ):
        (condition,) = hook["matchConditions"]
        assert condition["name"] == "not-generated-for-a-pod"
        expressions.append(str(condition["expression"]))
    return expressions


def generated(
    spec: dict[str, Any], *, controller: bool = True, kind: str = "Pod"
) -> dict[str, Any]:
    """Return the claim kube-controller-manager makes from a template of ``spec`` for a pod."""
    obj = kit.claim(spec, "p-gpu")
    reference = {
        "apiVersion": "v1",
        "kind": kind,
        "name": "p",
        "uid": "u",
        "controller": controller,
    }
    obj["metadata"]["ownerReferences"] = [reference]
    return obj


def test_claim_webhooks_skip_exactly_the_claims_generated_for_pods(
    rendered: Callable[[str], Rendered],
) -> None:
    """Templates and pre-made claims are sent; a pod's generated claim is not (both hooks)."""
    spec = kit.claim_spec(kit.request(capacity={"cores": "30"}))
    cases = {
        "template": (kit.template(spec), True),
        "pre-made claim": (kit.claim(spec), True),
        "claim owned by a pod, not as its controller": (generated(spec, controller=False), True),
        "claim controlled by something else": (generated(spec, kind="ReplicaSet"), True),
        "claim generated for a pod": (generated(spec), False),
    }
    for expression in claim_conditions(rendered("custom-driver-name")):
        for name, (obj, sent) in cases.items():
            assert cel.evaluate(expression, {"object": obj}) is sent, name


SPECS = {
    "share": kit.claim_spec(kit.request(capacity={"cores": "30", "memory": "5Gi"})),
    "too many cores": kit.claim_spec(kit.request(capacity={"cores": "150"})),
    "above the largest card": kit.claim_spec(kit.request(capacity={"memory": "100Gi"})),
    "unknown isolation": kit.claim_spec(kit.request(), configs=[kit.config(isolation="fast")]),
    "whole card": kit.claim_spec(kit.request()),
    "two shares": kit.claim_spec(kit.request("a"), kit.request("b", count=2)),
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_a_claim_generated_from_an_admitted_template_would_be_admitted_too(case: str) -> None:
    """Skipping generated claims loses nothing: whatever template passes, its claims pass too."""
    admission = Admission(kit.NAMES, kit.FakeCluster())
    template = kit.review(kit.template(SPECS[case]))
    template_passes = all(
        kit.response(outcome.body)["allowed"]
        for outcome in (admission.validate(template), admission.mutate(template))
    )
    claim = kit.review(generated(SPECS[case]))
    claim_passes = all(
        kit.response(outcome.body)["allowed"]
        for outcome in (admission.validate(claim), admission.mutate(claim))
    )
    assert claim_passes or not template_passes


def test_the_specs_include_templates_the_webhook_refuses() -> None:
    """The table above is not vacuous: some of its templates are refused, some admitted."""
    admission = Admission(kit.NAMES, kit.FakeCluster())
    answers = {
        case: kit.response(admission.validate(kit.review(kit.template(spec))).body)["allowed"]
        for case, spec in SPECS.items()
    }
    assert set(answers.values()) == {True, False}


# -- a certificate of the operator's own (webhook.tls) -----------------------------------------

CONFIGS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def own_ca_pem() -> str:
    """Return a fresh self-signed CA certificate in PEM, as an operator's PKI hands it out."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "operator CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_existing_secret_with_a_ca_bundle(helm: Path) -> None:
    """The chart mounts the operator's Secret, creates no certificate, and trusts the given CA."""
    pem = own_ca_pem()
    r = render(
        helm,
        {
            "webhook": {"tls": {"existingSecret": "webhook-cert", "caBundle": pem}},
            "metrics": {"serviceMonitor": {"enabled": True}},
        },
    )
    assert not {"Secret", "Certificate", "Issuer"} & {o["kind"] for o in r.objects}
    assert mounted_secret(r) == "webhook-cert"
    for kind in CONFIGS:
        assert base64.b64decode(webhook(r, kind)["clientConfig"]["caBundle"]).decode() == pem
        assert "annotations" not in r.one(kind)["metadata"]
    endpoints = {e["port"]: e for e in r.one("ServiceMonitor")["spec"]["endpoints"]}
    ca = endpoints["webhook-metrics"]["tlsConfig"]["ca"]["secret"]
    assert ca == {"name": "webhook-cert", "key": "ca.crt"}
    for obj in r.objects:
        if obj["kind"] != "ServiceMonitor":
            for version in KUBE_VERSIONS:
                validate(obj, version)


def test_existing_secret_with_cert_manager_ca_injection(helm: Path) -> None:
    """injectCAFromSecret: cert-manager's injector copies the Secret's ca.crt; no caBundle."""
    r = render(
        helm, {"webhook": {"tls": {"existingSecret": "webhook-cert", "injectCAFromSecret": True}}}
    )
    assert not {"Secret", "Certificate", "Issuer"} & {o["kind"] for o in r.objects}
    assert mounted_secret(r) == "webhook-cert"
    for kind in CONFIGS:
        assert r.one(kind)["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from-secret": f"{NAMESPACE}/webhook-cert"
        }
        assert "caBundle" not in webhook(r, kind)["clientConfig"]
        for version in KUBE_VERSIONS:
            validate(r.one(kind), version)


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ({"existingSecret": "webhook-cert"}, "webhook.tls.existingSecret needs the CA"),
        (
            {"existingSecret": "webhook-cert", "caBundle": "PEM", "injectCAFromSecret": True},
            "give caBundle or injectCAFromSecret=true, not both",
        ),
        ({"caBundle": "PEM"}, "apply only with webhook.tls.existingSecret"),
        ({"injectCAFromSecret": True}, "apply only with webhook.tls.existingSecret"),
        (
            {"existingSecret": "webhook-cert", "caBundle": "PEM", "certManager": True},
            "webhook.tls.existingSecret and webhook.certManager.enabled exclude each other",
        ),
    ],
    ids=["no-ca", "both-cas", "ca-alone", "injection-alone", "and-cert-manager"],
)
def test_inconsistent_tls_values_are_refused(helm: Path, tls: dict[str, Any], message: str) -> None:
    """A Secret without a CA to trust, or CA settings that would be ignored, fail the render."""
    tls = dict(tls)
    webhook_values: dict[str, Any] = {
        "certManager": {"enabled": bool(tls.pop("certManager", False))}
    }
    if tls.get("caBundle") == "PEM":
        tls["caBundle"] = own_ca_pem()
    webhook_values["tls"] = tls
    with pytest.raises(HelmError, match=re.escape(message)):
        render(helm, {"webhook": webhook_values})


@pytest.mark.parametrize(
    "tls",
    [
        {"existingSecret": "webhook-cert", "caBundle": "LS0tLS1CRUdJTi=="},
        {"existingSecret": "Webhook_Cert", "injectCAFromSecret": True},
        {"existingSecret": "webhook-cert", "injectCAFromSecret": "yes"},
    ],
    ids=["base64-not-pem", "bad-secret-name", "non-boolean"],
)
def test_schema_refuses_malformed_tls_values(helm: Path, tls: dict[str, Any]) -> None:
    """caBundle must be PEM (the chart encodes it), the Secret name a DNS subdomain."""
    with pytest.raises(HelmError) as failure:
        render(helm, {"webhook": {"tls": tls}})
    assert "values don't meet the specifications of the schema" in str(failure.value)
    assert "at '/webhook/tls/" in str(failure.value)
