"""``plan`` warns about templates and claims no pod uses that would be refused."""

from __future__ import annotations

from typing import Any

from plan.builders import NAMES, claim, dump, plan_of, pod, template


def with_isolation(obj: dict[str, Any], isolation: str) -> dict[str, Any]:
    """Add a GpuShareConfig with ``isolation`` to a template's or claim's device spec."""
    spec = obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]
    parameters = {"apiVersion": NAMES.config_api_version, "kind": "GpuShareConfig"}
    opaque = {"driver": NAMES.driver, "parameters": {**parameters, "isolation": isolation}}
    spec["devices"]["config"] = [{"opaque": opaque}]
    return obj


def test_an_unused_template_that_would_be_refused_is_a_warning_naming_it() -> None:
    """A bad template no pod uses is reported with its document and the refusal's reason."""
    bad = with_isolation(template("too-big", cores="30", memory="4Gi"), "fixed")
    workload = dump(bad, template("fine", cores="30", memory="4Gi"), pod("p", "fine"))
    problems = plan_of(workload).problems
    assert len(problems) == 1
    assert problems[0].startswith(
        "ResourceClaimTemplate default/too-big (document 1) is used by no pod of the file, and "
        "would be refused: spec.spec.devices.config[0]"
    )
    assert problems[0].endswith(
        'isolation: Unsupported value: "fixed": supported values: "best-effort", '
        '"burst-share", "exclusive", "fixed-share"'
    )


def test_unused_but_valid_templates_and_claims_are_not_warnings() -> None:
    """Templates and claims that a pod could use cause no warning, used or not."""
    workload = dump(
        template("spare", cores="10", memory="1Gi"),
        claim("standby", cores="10", memory="1Gi"),
        template("fine", cores="30", memory="4Gi"),
        pod("p", "fine"),
    )
    assert plan_of(workload).problems == ()


def test_an_unused_claim_that_would_be_refused_is_a_warning_too() -> None:
    """A bad standalone ResourceClaim is judged like a template."""
    workload = dump(with_isolation(claim("huge", cores="30", memory="1Gi"), "shared"), pod("p"))
    (problem,) = plan_of(workload).problems
    assert problem.startswith("ResourceClaim default/huge (document 1) is used by no pod")
