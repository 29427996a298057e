"""What the driver's admission webhook would say of a workload's templates and claims.

The chart installs the webhook, so a template or claim it refuses is never created: ``kubectl
apply`` fails, and a pod that uses it waits for a claim that never comes. A plan asks the same
two questions of every template and claim in the file, against the cluster's cards and
DeviceClasses: is it valid (sizes, capacity names, the largest card, the policy the default
backend can enforce), and does it ask for capacity this cluster's API server would drop. The
messages are the webhook's, with field paths in the document the user wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dra_driver.api import Backend, DriverNames
from dra_driver.k8s.objects import Object
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.workload import Workload
from dra_driver.validation.capacity import limits_from_slices
from dra_driver.validation.claimspec import validate_claim_spec
from dra_driver.validation.dropped import dropped_capacity


def refusals(
    names: DriverNames,
    cluster: ClusterObjects,
    workload: Workload,
    default_backend: Backend | None = None,
) -> dict[str, str]:
    """Map the label of each template or claim the webhook would refuse to why."""
    limits = limits_from_slices(cluster.slices)
    classes = {str(c["metadata"]["name"]): c for c in cluster.classes}
    documents: dict[str, tuple[Object, str]] = {}
    for pod in workload.pods:
        for entry in pod.claims:
            documents.setdefault(entry.origin, (entry.claim.get("spec") or {}, entry.spec_path))
    for unused in workload.unused:
        documents.setdefault(unused.origin, (unused.claim.get("spec") or {}, unused.spec_path))
    found = {}
    for label, (spec, path) in documents.items():
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
