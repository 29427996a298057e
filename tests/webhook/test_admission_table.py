"""AdmissionReview request -> response, case by case, through the pure admission layer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from webhook.kit import (
    API_VERSION,
    DRIVER,
    GATE,
    NAMES,
    NVIDIA,
    FakeCluster,
    Object,
    claim,
    claim_spec,
    config,
    decoded_patch,
    exactly,
    from_claim,
    from_template,
    pod,
    request,
    response,
    review,
    share_template,
    template,
)

from dra_driver.validation.capacity import Limits
from dra_driver.webhook.admission import Admission

REQ = "spec.devices.requests[0].exactly"
CAP = f"{REQ}.capacity.requests"
PARAMS = "spec.devices.config[0].opaque.parameters"
CORES_RULE = "must be a whole number from 0 to 100 (percent of the card's SMs)"
MEMORY_RULE = (
    "must be at least 1Mi; memory is handed out in whole MiB, and other amounts are rounded up "
    "to the next MiB"
)
ISOLATIONS = '"best-effort", "burst-share", "exclusive", "fixed-share"'
MPS_BURST = (
    'backend "mps": isolation "burst-share": the MPS active thread percentage is a hard cap '
    'and cannot lend idle compute; use isolation "fixed-share" or "best-effort", or backend '
    '"hami-core"'
)
OURS_TEMPLATE = share_template()
NVIDIA_TEMPLATE = template(claim_spec(request(device_class=NVIDIA)), "nvidia")
CREATE_GATES = [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]


@dataclass(frozen=True)
class Expect:
    """The answer a case must get: HTTP status, and for a 200 the review's decision."""

    status: int = 200
    allowed: bool = True
    message: str | None = None
    patch: list[Object] | None = None


ALLOWED = Expect()


def denied(*errors: str) -> Expect:
    """Expect a 422 Invalid denial whose message is exactly these errors, aggregated."""
    message = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return Expect(allowed=False, message=message)


def cluster_with(**fields: object) -> Callable[[], FakeCluster]:
    return lambda: FakeCluster(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    id: str
    route: str
    body: bytes
    expect: Expect
    cluster: Callable[[], FakeCluster] = field(default=FakeCluster)
    fetched: list[tuple[str, str, str]] = field(default_factory=list)


def make_case(route: str, id: str, obj: Object, expect: Expect, **kwargs: object) -> Case:
    operation = str(kwargs.pop("operation", "CREATE"))
    namespace = str(kwargs.pop("namespace", "default"))
    body = review(obj, operation, namespace)
    return Case(id, route, body, expect, **kwargs)  # type: ignore[arg-type]


def validate(id: str, obj: Object, expect: Expect, **kwargs: object) -> Case:
    return make_case("validate", id, obj, expect, **kwargs)


def mutate(id: str, obj: Object, expect: Expect, **kwargs: object) -> Case:
    return make_case("mutate", id, obj, expect, **kwargs)


def one(**fields: object) -> Object:
    """Build a claim with one request of our default class."""
    configs = fields.pop("configs", None)
    return claim(claim_spec(request(**fields), configs=configs))  # type: ignore[arg-type]


CLAIM_CASES = [
    validate(
        "share-with-config",
        one(capacity={"cores": "30", "memory": "5Gi"}, configs=[config(isolation="fixed-share")]),
        ALLOWED,
    ),
    validate("whole-card-without-requests", one(), ALLOWED),
    validate(
        "cores-150",
        one(capacity={"cores": "150"}),
        denied(f'{CAP}[cores]: Invalid value: "150": {CORES_RULE}'),
    ),
    validate(
        "fractional-cores",
        one(capacity={"cores": "10500m"}),
        denied(f'{CAP}[cores]: Invalid value: "10500m": {CORES_RULE}'),
    ),
    validate(
        "negative-cores",
        one(capacity={"cores": "-1"}),
        denied(f'{CAP}[cores]: Invalid value: "-1": {CORES_RULE}'),
    ),
    validate("zero-cores-memory-only", one(capacity={"cores": "0", "memory": "1Gi"}), ALLOWED),
    validate(
        "memory-0",
        one(capacity={"memory": "0"}),
        denied(f'{CAP}[memory]: Invalid value: "0": {MEMORY_RULE}'),
    ),
    validate(
        "memory-below-1Mi",
        one(capacity={"memory": "512Ki"}),
        denied(f'{CAP}[memory]: Invalid value: "512Ki": {MEMORY_RULE}'),
    ),
    validate("memory-off-the-MiB-grid-is-rounded-up", one(capacity={"memory": "1536Ki"}), ALLOWED),
    validate("memory-of-the-largest-card", one(capacity={"memory": "80Gi"}), ALLOWED),
    validate(
        "memory-above-the-largest-card",
        one(capacity={"memory": "100Gi"}),
        denied(
            f'{CAP}[memory]: Invalid value: "100Gi": must be at most 80Gi, the memory of the '
            f"largest {DRIVER} card in the cluster"
        ),
    ),
    validate(
        "claim-generated-for-a-pod-is-not-checked-against-the-cards-published-now",
        {
            **one(capacity={"memory": "100Gi"}),
            "metadata": {
                "name": "p-gpu",
                "namespace": "default",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}
                ],
            },
        },
        # Its template was checked at creation; the 100Gi node may just be restarting.
        ALLOWED,
    ),
    validate(
        "memory-unchecked-without-slices",
        one(capacity={"memory": "100Gi", "cores": "20"}, count=9),
        ALLOWED,
        cluster=cluster_with(limits_value=Limits()),
    ),
    validate(
        "unknown-capacity-name",
        one(capacity={"gpus": "1"}),
        denied(f'{CAP}[gpus]: Unsupported value: "gpus": supported values: "cores", "memory"'),
    ),
    validate(
        "unknown-isolation",
        one(configs=[config(isolation="fast")]),
        denied(f'{PARAMS}.isolation: Unsupported value: "fast": supported values: {ISOLATIONS}'),
    ),
    validate(
        "unknown-field",
        one(configs=[config(isolaton="fixed-share")]),
        denied(
            f'{PARAMS}.isolaton: Unknown field: allowed fields: "apiVersion", "backend", '
            '"cores", "isolation", "kind", "memory", "placement", "preemptible", "priority"'
        ),
    ),
    validate(
        "config-too-large",
        one(configs=[config(isolation="x" * 10300)]),
        denied(f"{PARAMS}: Too long: 10381 bytes, must have at most 10240 bytes"),
    ),
    validate(
        "config-of-another-api-version",
        one(configs=[{"opaque": {"driver": DRIVER, "parameters": {"apiVersion": "v1"}}}]),
        denied(f'{PARAMS}.apiVersion: Invalid value: "v1": must be "{API_VERSION}"'),
    ),
    validate(
        "count-above-the-most-cards-on-a-node",
        one(count=5),
        denied(
            f"{REQ}.count: Invalid value: 5: must be at most 4: no node in the cluster has more "
            f"{DRIVER} cards, and a pod's devices are all on one node"
        ),
    ),
    validate(
        "all-devices-with-capacity",
        one(allocationMode="All", capacity={"cores": "10", "memory": "1Gi"}),
        ALLOWED,
    ),
    validate(
        "invalid-cel",
        one(selectors=[{"cel": {"expression": "device.driver =="}}]),
        denied(
            f'{REQ}.selectors[0].cel.expression: Invalid value: "device.driver ==": invalid CEL '
            "selector \"device.driver ==\": <input>:1:17: Syntax error: mismatched input '<EOF>' "
            "expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, "
            "NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"
        ),
    ),
    validate(
        "unknown-cel-variable",
        one(selectors=[{"cel": {"expression": "gpu.memory > 1"}}]),
        denied(
            f'{REQ}.selectors[0].cel.expression: Invalid value: "gpu.memory > 1": unknown '
            'variable "gpu" in CEL selector "gpu.memory > 1"; the only variable is "device"'
        ),
    ),
    validate(
        "mps-with-burst-share",
        one(configs=[config(backend="mps", isolation="burst-share")]),
        denied(f"{REQ}: Forbidden: {MPS_BURST}"),
    ),
    validate(
        "mps-by-default-isolation",
        one(configs=[config(backend="mps")]),
        denied(f"{REQ}: Forbidden: {MPS_BURST}"),
    ),
    validate(
        "mps-class-with-burst-share-from-the-claim",
        claim(
            claim_spec(
                request(device_class=f"mps.{DRIVER}", capacity={"cores": "50"}),
                configs=[config(isolation="burst-share")],
            )
        ),
        denied(f"{REQ}: Forbidden: {MPS_BURST}"),
    ),
    validate(
        "mps-class-overridden-by-the-claim",
        claim(
            claim_spec(
                request(device_class=f"mps.{DRIVER}"),
                configs=[config(isolation="burst-share", backend="hami-core")],
            )
        ),
        ALLOWED,
    ),
    validate(
        "mps-with-fixed-share",
        one(capacity={"cores": "40"}, configs=[config(backend="mps", isolation="fixed-share")]),
        ALLOWED,
    ),
    validate(
        "hami-core-fixed-share-with-0-cores",
        one(
            capacity={"cores": "0"}, configs=[config(backend="hami-core", isolation="fixed-share")]
        ),
        denied(
            f'{REQ}: Forbidden: backend "hami-core": isolation "fixed-share": request "gpu" has '
            "0 cores, and HAMi-core reads CUDA_DEVICE_SM_LIMIT 0 as no limit; request at least "
            '1 core, or use isolation "best-effort"'
        ),
    ),
    validate(
        "hami-core-with-17-cards",
        one(count=17, configs=[config(backend="hami-core")]),
        denied(
            f'{REQ}: Forbidden: backend "hami-core": cards "17": HAMi-core limits at most 16 '
            "cards per container (CUDA_DEVICE_MAX_COUNT); request at most 16 cards, or use "
            'backend "none"'
        ),
        cluster=cluster_with(limits_value=Limits(most_cards=32)),
    ),
    validate("admin-access", one(adminAccess=True), ALLOWED),
    validate(
        "admin-access-beside-a-share",
        claim(
            claim_spec(
                request("watch", adminAccess=True),
                request("work", capacity={"cores": "30", "memory": "2Gi"}),
            )
        ),
        denied(
            "spec.devices.requests[0].exactly.adminAccess: Invalid value: true: a claim asks "
            f"for admin access in all of its {DRIVER} requests or in none; ask for admin "
            "access and for shares in separate claims"
        ),
    ),
    validate(
        "another-drivers-claim-is-untouched",
        claim(
            claim_spec(
                request(device_class=NVIDIA, capacity={"cores": "150"}, adminAccess=True),
                configs=[config(driver=NVIDIA, isolation="fast")],
            )
        ),
        ALLOWED,
    ),
    validate(
        "our-config-in-another-drivers-claim-is-still-checked",
        claim(claim_spec(request(device_class=NVIDIA), configs=[config(priority="urgent")])),
        denied(
            f'{PARAMS}.priority: Unsupported value: "urgent": supported values: "offline", "online"'
        ),
    ),
    validate(
        "class-not-known-yet",
        one(device_class="later.example.com", capacity={"cores": "150"}),
        ALLOWED,
    ),
    validate(
        "claim-mixing-our-class-with-another-drivers",
        claim(claim_spec(request(), request("nic", device_class=NVIDIA))),
        denied(
            f'spec.devices.requests[1].exactly.deviceClassName: Invalid value: "{NVIDIA}": a '
            f"claim that asks for {DRIVER} devices must use only {DRIVER} DeviceClasses; "
            "request the other devices in a claim of their own"
        ),
    ),
    validate(
        "class-with-a-broken-config",
        one(device_class=f"broken.{DRIVER}"),
        denied(
            f'{REQ}.deviceClassName: Invalid value: "broken.{DRIVER}": the DeviceClass cannot '
            "be used until its administrator fixes it: spec.config[0].opaque.parameters"
            f'.apiVersion: Required value: must be "{API_VERSION}"'
        ),
    ),
    validate(
        "requests-with-different-policies",
        claim(
            claim_spec(
                request("a", capacity={"cores": "10"}),
                request("b", capacity={"cores": "10"}),
                configs=[config(["a"], isolation="fixed-share"), config(["b"], priority="offline")],
            )
        ),
        denied(
            'spec.devices.requests[1].exactly: Invalid value: "b": must have the same '
            'isolation, priority and backend as "a": all the devices of one claim share one '
            "policy; use one claim per policy"
        ),
    ),
    validate(
        "requests-differing-only-in-placement",
        claim(
            claim_spec(
                request("a", capacity={"cores": "10"}),
                request("b", capacity={"cores": "10"}),
                configs=[config(["a"], placement="spread"), config(["b"], placement="binpack")],
            )
        ),
        ALLOWED,
    ),
    validate(
        "first-available-alternatives-with-different-policies",
        claim(
            claim_spec(
                {
                    "name": "a",
                    "firstAvailable": [
                        {"name": "on", **exactly(f"online.{DRIVER}")},
                        {"name": "off", **exactly(f"offline.{DRIVER}")},
                    ],
                },
                request("b", device_class=f"offline.{DRIVER}"),
            )
        ),
        # The controller may take either alternative, so both must match request b's policy.
        denied(
            'spec.devices.requests[0].firstAvailable[1]: Invalid value: "a/off": must have the '
            'same isolation, priority and backend as "a/on": all the devices of one claim '
            "share one policy; use one claim per policy",
            'spec.devices.requests[1].exactly: Invalid value: "b": must have the same '
            'isolation, priority and backend as "a/on": all the devices of one claim share one '
            "policy; use one claim per policy",
        ),
    ),
    validate(
        "first-available-alternative-asking-too-much-is-skipped",
        claim(
            claim_spec(
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "huge", **exactly(capacity={"memory": "160Gi"})},
                        {"name": "big", **exactly(capacity={"memory": "40Gi"})},
                    ],
                }
            )
        ),
        # The controller skips an alternative no card can hold and takes the next one.
        ALLOWED,
    ),
    validate(
        "every-first-available-alternative-asking-too-much",
        claim(
            claim_spec(
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "huge", **exactly(capacity={"memory": "160Gi"})},
                        {"name": "many", **exactly(count=8)},
                    ],
                }
            )
        ),
        denied(
            "spec.devices.requests[0].firstAvailable[0].capacity.requests[memory]: Invalid "
            f'value: "160Gi": must be at most 80Gi, the memory of the largest {DRIVER} card in '
            "the cluster",
            "spec.devices.requests[0].firstAvailable[1].count: Invalid value: 8: must be at "
            f"most 4: no node in the cluster has more {DRIVER} cards, and a pod's devices are "
            "all on one node",
        ),
    ),
    validate(
        "several-errors-are-aggregated",
        one(capacity={"cores": "150", "memory": "0"}),
        denied(
            f'{CAP}[cores]: Invalid value: "150": {CORES_RULE}',
            f'{CAP}[memory]: Invalid value: "0": {MEMORY_RULE}',
        ),
    ),
    validate("update-is-not-judged", one(capacity={"cores": "150"}), ALLOWED, operation="UPDATE"),
]

TEMPLATE_CASES = [
    validate("template-share", OURS_TEMPLATE, ALLOWED),
    validate(
        "template-cores-150",
        template(claim_spec(request(capacity={"cores": "150"}))),
        denied(
            f"spec.spec.devices.requests[0].exactly.capacity.requests[cores]: Invalid value: "
            f'"150": {CORES_RULE}'
        ),
    ),
    validate(
        "template-unknown-priority",
        template(claim_spec(request(), configs=[config(priority="high")])),
        denied(
            'spec.spec.devices.config[0].opaque.parameters.priority: Unsupported value: "high": '
            'supported values: "offline", "online"'
        ),
    ),
]

POD_CASES = [
    mutate(
        "pod-with-our-template-is-gated",
        pod(from_template("share")),
        Expect(patch=CREATE_GATES),
        cluster=cluster_with(templates={("default", "share"): OURS_TEMPLATE}),
    ),
    mutate(
        "pod-with-another-gate-gets-ours-appended",
        pod(from_template("share"), gates=["example.com/quota"]),
        Expect(patch=[{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]),
        cluster=cluster_with(templates={("default", "share"): OURS_TEMPLATE}),
    ),
    mutate(
        "already-gated-pod-is-unchanged",
        pod(from_template("share"), gates=[GATE]),
        ALLOWED,
        cluster=cluster_with(templates={("default", "share"): OURS_TEMPLATE}),
    ),
    mutate("unrelated-pod-is-untouched", pod(), ALLOWED),
    mutate(
        "pod-of-another-driver-is-untouched",
        pod(from_template("nvidia")),
        ALLOWED,
        cluster=cluster_with(templates={("default", "nvidia"): NVIDIA_TEMPLATE}),
    ),
    mutate(
        "template-missing-from-the-cache-is-read-live",
        pod(from_template("share")),
        Expect(patch=CREATE_GATES),
        cluster=cluster_with(live={("ResourceClaimTemplate", "default", "share"): OURS_TEMPLATE}),
        fetched=[("ResourceClaimTemplate", "default", "share")],
    ),
    mutate(
        "template-missing-everywhere-leaves-the-pod-alone",
        pod(from_template("share")),
        ALLOWED,
        fetched=[("ResourceClaimTemplate", "default", "share")],
    ),
    mutate(
        "pod-with-our-existing-claim-is-gated",
        pod(from_claim("mine"), namespace=None),
        Expect(patch=CREATE_GATES),
        cluster=cluster_with(claims={("team", "mine"): one()}),
        namespace="team",
    ),
    mutate(
        "pod-bound-to-a-node-is-never-gated",
        pod(from_template("share"), nodeName="node-a"),
        ALLOWED,
        cluster=cluster_with(templates={("default", "share"): OURS_TEMPLATE}),
    ),
    mutate(
        "containers-sharing-a-hami-core-request-are-refused",
        pod(
            from_template("share"),
            containers=[
                {"name": c, "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
                for c in ("main", "side")
            ],
        ),
        denied(
            'spec.containers[1].resources.claims: Forbidden: containers "main" and "side" both '
            'use request "gpu" of claim "template share" with backend "hami-core", whose '
            "processes must all see each other to keep one account of the share: give each "
            'container a request (or claim) of its own, or use backend "none"'
        ),
        cluster=cluster_with(templates={("default", "share"): OURS_TEMPLATE}),
    ),
    mutate(
        "pod-update-is-not-mutated",
        pod(from_template("share")),
        ALLOWED,
        cluster=cluster_with(templates={("default", "share"): OURS_TEMPLATE}),
        operation="UPDATE",
    ),
]

REVIEW_CASES = [
    Case("body-not-json", "validate", b"{not json", Expect(status=400)),
    Case(
        "review-of-another-version",
        "mutate",
        review(pod()).replace(b"admission.k8s.io/v1", b"admission.k8s.io/v1beta1"),
        Expect(status=400),
    ),
    Case("review-without-uid", "validate", review(one()).replace(b'"uid"', b'"id"'), Expect(400)),
    validate(
        "cache-not-synced",
        one(capacity={"cores": "150"}),
        Expect(status=503),
        cluster=cluster_with(synced=False),
    ),
    validate("pod-sent-to-validate-is-allowed", pod(from_template("share")), ALLOWED),
]

CASES = CLAIM_CASES + TEMPLATE_CASES + POD_CASES + REVIEW_CASES


def test_there_are_enough_cases() -> None:
    """The table covers at least 30 reviews, valid and invalid, of every kind."""
    assert len(CASES) >= 30
    assert sum(case.expect.message is not None for case in CASES) >= 15
    assert sum(case.expect == ALLOWED for case in CASES) >= 10


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_review_gets_exactly_the_expected_answer(case: Case) -> None:
    """Each review gets the expected HTTP status, decision, exact message and exact patch."""
    cluster = case.cluster()
    admission = Admission(NAMES, cluster)
    outcome = (
        admission.validate(case.body) if case.route == "validate" else admission.mutate(case.body)
    )
    expect = case.expect
    assert outcome.status == expect.status, outcome.body
    assert cluster.fetched == case.fetched
    if expect.status != 200:
        assert outcome.content_type.startswith("text/plain")
        return
    answer = response(outcome.body)
    assert answer["allowed"] is expect.allowed
    if expect.message is None:
        assert "status" not in answer
    else:
        assert answer["status"] == {
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": expect.message,
        }
    if expect.patch is None:
        assert "patch" not in answer
    else:
        assert decoded_patch(answer) == expect.patch
