"""What the driver's admission webhook would say of a workload's templates and claims.

The chart installs the webhook, so a template or claim it refuses is never created: ``kubectl
apply`` fails, and a pod that uses it waits for a claim that never comes. A plan asks the same
questions of every template and claim in the file, against the cluster's cards, DeviceClasses
and GpuShareQuotas: is it valid (sizes, capacity names, the largest card, the policy the
default backend can enforce), does it ask for capacity this cluster's API server would drop,
and does it alone ask more than a quota of its namespace allows. The messages are the
webhook's, with field paths in the document the user wrote. Templates and claims no pod uses
are judged too, and also as the controller would judge a pod using them
(:func:`unused_problems`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from dra_driver.api import Backend, DriverNames, Placement
from dra_driver.engine import Policy, Snapshot, Unplaceable, place_pod
from dra_driver.k8s import objects
from dra_driver.k8s.objects import Object
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.workload import Workload
from dra_driver.quota import Quota
from dra_driver.validation.capacity import limits_from_slices
from dra_driver.validation.claimspec import validate_claim_spec
from dra_driver.validation.dropped import dropped_capacity
from dra_driver.validation.quota import quota_problems


def refusals(
    names: DriverNames,
    cluster: ClusterObjects,
    workload: Workload,
    default_backend: Backend | None = None,
    *,
    quotas: Sequence[Quota] = (),
) -> dict[str, str]:
    """Map the label of each template or claim the webhook would refuse to why."""
    limits = limits_from_slices(cluster.slices)
    classes = {str(c["metadata"]["name"]): c for c in cluster.classes}
    documents: dict[str, tuple[Object, str, str]] = {}
    for file_claim in [*(e for pod in workload.pods for e in pod.claims), *workload.unused]:
        claim = file_claim.claim
        documents.setdefault(
            file_claim.origin,
            (claim.get("spec") or {}, file_claim.spec_path, objects.namespace(claim)),
        )
    found = {}
    for label, (spec, path, namespace) in documents.items():
        errors = [
            *validate_claim_spec(
                spec,
                path=path,
                names=names,
                classes=classes,
                limits=limits,
                default_backend=default_backend,
            ),
            *dropped_capacity(spec, path=path, names=names, classes=classes, limits=limits),
        ]
        if not errors:
            errors = quota_problems(
                spec,
                path=path,
                names=names,
                classes=classes,
                quotas=[q for q in quotas if q.namespace == namespace],
            )
        if errors:
            found[label] = _joined(errors)
    return found


def _joined(errors: Iterable[str]) -> str:
    return "; ".join(dict.fromkeys(errors))


def pod_refusal(origins: Iterable[str], refused: Mapping[str, str]) -> str | None:
    """Return why a pod using claims from ``origins`` could not start, or ``None``."""
    reasons = [
        f"{origin} would be refused: {refused[origin]}" for origin in origins if origin in refused
    ]
    return "; ".join(reasons) or None


def unused_problems(
    baseline: Snapshot, workload: Workload, refused: Mapping[str, str]
) -> list[str]:
    """Say which templates and claims no pod uses would be refused if a pod did.

    A mistake there shows nowhere else in the plan, and would only surface at ``kubectl apply``
    (the webhook) or, for the first pod that uses it, as a refused placement.
    """
    problems = []
    for unused in workload.unused:
        if unused.origin in refused:
            problems.append(
                f"{unused.origin} is used by no pod of the file, and would be refused: "
                f"{refused[unused.origin]}"
            )
            continue
        metadata = unused.claim["metadata"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "unused", "namespace": metadata["namespace"]},
            "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": metadata["name"]}]},
        }
        decision = place_pod(baseline, pod, [unused.claim], Policy.uniform(Placement.BINPACK))
        if isinstance(decision, Unplaceable) and decision.refused:
            problems.append(
                f"{unused.origin} is used by no pod of the file; a pod using it would be "
                f"refused: {decision.reason}"
            )
    return problems
