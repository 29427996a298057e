"""A cluster read from a live API server (``plan --kubeconfig``): read-only, one list per kind.

Every claim is read, whoever allocated it, because every allocation takes capacity from the
cards; slices are only this driver's. GpuShareQuotas are read where the cluster serves them
(no CRD: none); an account that may not list them gets a plan without them, and a warning.
For preemption, the pods on nodes (the victims an online pod of the plan may evict) and the
PodDisruptionBudgets are read too; budgets that cannot be listed (403, 404) are left out, with
one warning.
"""

from __future__ import annotations

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.k8s import raw
from dra_driver.k8s.client import ClientConfigError, new_api_client
from dra_driver.k8s.errors import ForbiddenError, NotFoundError
from dra_driver.k8s.objects import Object
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.errors import PlanInputError


def _items(listed: Object) -> tuple[Object, ...]:
    return tuple(listed.get("items") or ())


def _quotas(api_client: client.ApiClient, names: DriverNames) -> tuple[tuple[Object, ...], str]:
    """List every GpuShareQuota; none where the CRD is absent, none and why where forbidden."""
    group, version = names.quota_group_version
    custom = client.CustomObjectsApi(api_client)
    try:
        listed = raw.call(custom.list_cluster_custom_object, group, version, names.quota_plural)
    except NotFoundError:
        return (), ""
    except ForbiddenError as exc:
        return (), f"cannot list {names.quota_plural}.{group}, planned without quotas: {exc}"
    return _items(listed), ""


def _budgets(api_client: client.ApiClient) -> tuple[tuple[Object, ...], str]:
    """List every PodDisruptionBudget; none, and why, where they cannot be listed."""
    policy = client.PolicyV1Api(api_client)
    try:
        listed = raw.call(policy.list_pod_disruption_budget_for_all_namespaces)
    except (NotFoundError, ForbiddenError) as exc:
        return (), (
            "cannot list poddisruptionbudgets.policy, planned preemptions ignore disruption "
            f"budgets: {exc}"
        )
    return _items(listed), ""


def live_cluster(names: DriverNames, kubeconfig: str) -> ClusterObjects:
    """List nodes, slices, classes, claims, quotas, pods on nodes and budgets via ``kubeconfig``.

    Raise :class:`PlanInputError` for an unusable kubeconfig; API failures surface as
    :class:`~dra_driver.k8s.errors.ApiError`.
    """
    try:
        api_client = new_api_client(KubeClientSettings(kubeconfig=kubeconfig), "plan")
    except ClientConfigError as exc:
        raise PlanInputError(str(exc)) from None
    with api_client:
        core, resource = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)
        host = api_client.configuration.host
        quotas, problem = _quotas(api_client, names)
        budgets, budget_problem = _budgets(api_client)
        return ClusterObjects(
            source=f"cluster {host}",
            nodes=_items(raw.call(core.list_node)),
            slices=_items(
                raw.call(resource.list_resource_slice, field_selector=f"spec.driver={names.driver}")
            ),
            classes=_items(raw.call(resource.list_device_class)),
            claims=_items(raw.call(resource.list_resource_claim_for_all_namespaces)),
            quotas=quotas,
            pods=_items(
                raw.call(core.list_pod_for_all_namespaces, field_selector="spec.nodeName!=")
            ),
            budgets=budgets,
            problems=tuple(p for p in (problem, budget_problem) if p),
        )
