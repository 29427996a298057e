"""A claim larger than a GpuShareQuota of its namespace allows is refused at creation."""

from __future__ import annotations

from typing import Any

import yaml
from webhook.kit import (
    NAMES,
    FakeCluster,
    claim,
    claim_spec,
    config,
    exactly,
    request,
    response,
    review,
    template,
)

from dra_driver.quota import Quota, parse_quota
from dra_driver.webhook.admission import Admission


def quota(name: str, namespace: str = "team-a", **spec: Any) -> Quota:
    """Parse a GpuShareQuota as a user writes it in YAML."""
    text = f"""
apiVersion: {NAMES.driver}/v1alpha1
kind: GpuShareQuota
metadata: {{name: {name}, namespace: {namespace}}}
spec: {yaml.safe_dump(spec, default_flow_style=True).strip()}
"""
    return parse_quota(yaml.safe_load(text))


def answer(obj: dict[str, Any], *quotas: Quota) -> dict[str, Any]:
    """Return the webhook's validating answer for creating ``obj`` in team-a."""
    cluster = FakeCluster(quota_list=list(quotas))
    return response(Admission(NAMES, cluster).validate(review(obj, namespace="team-a")).body)


def share(cores: str, memory: str = "1Gi", count: int = 1) -> dict[str, Any]:
    return request(capacity={"cores": cores, "memory": memory}, count=count)


def test_a_claim_over_a_quota_by_itself_is_refused_naming_the_quota_and_resource() -> None:
    """Two 60-core shares in one claim can never fit 100 cores: refused, saying which quota."""
    spec = claim_spec(share("60", count=2))
    found = answer(claim(spec, namespace="team-a"), quota("gpu", hard={"cores": "100"}))
    assert found["allowed"] is False
    message = found["status"]["message"]
    assert "spec.devices.requests: Forbidden: GpuShareQuota team-a/gpu allows cores 100" in message
    assert "this claim alone asks at least 120" in message


def test_a_template_is_held_to_every_quota_of_its_namespace() -> None:
    """Two quotas both apply: the memory one refuses a template the cores one would allow."""
    spec = claim_spec(share("30", memory="12Gi"))
    found = answer(
        template(spec, namespace="team-a"),
        quota("cores", hard={"cores": "100"}),
        quota("memory", hard={"memory": "10Gi"}),
    )
    assert found["allowed"] is False
    assert "GpuShareQuota team-a/memory allows memory 10Gi" in found["status"]["message"]
    assert "team-a/cores" not in found["status"]["message"]


def test_a_claim_within_every_quota_or_in_another_namespace_is_allowed() -> None:
    """Within hard, or limited only in another namespace: allowed."""
    spec = claim_spec(share("60"))
    assert answer(claim(spec, namespace="team-a"), quota("gpu", hard={"cores": "100"}))["allowed"]
    elsewhere = quota("gpu", namespace="team-b", hard={"cores": "10"})
    assert answer(claim(spec, namespace="team-a"), elsewhere)["allowed"]


def test_whole_cards_count_against_cards_and_the_smallest_alternative_decides() -> None:
    """Two whole cards pass cards 1 never; firstAvailable with a share that fits is allowed."""
    whole = claim_spec(request(count=2))
    refused = answer(claim(whole, namespace="team-a"), quota("gpu", hard={"cards": "1"}))
    assert refused["allowed"] is False
    assert "allows cards 1" in refused["status"]["message"]
    either = claim_spec(
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "whole", **exactly(count=2)},
                {"name": "half", **exactly(capacity={"cores": "50", "memory": "1Gi"})},
            ],
        }
    )
    assert answer(claim(either, namespace="team-a"), quota("gpu", hard={"cards": "1"}))["allowed"]


def test_a_priority_quota_ignores_claims_of_the_other_priority() -> None:
    """An offline quota of 10 cores lets an online 60-core claim through, not an offline one."""
    offline = quota("batch", hard={"cores": "10"}, priority="offline")
    online_spec = claim_spec(share("60"), configs=[config(priority="online")])
    offline_spec = claim_spec(share("60"), configs=[config(priority="offline")])
    assert answer(claim(online_spec, namespace="team-a"), offline)["allowed"]
    assert answer(claim(offline_spec, namespace="team-a"), offline)["allowed"] is False
