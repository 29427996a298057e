"""A cluster read from a live API server (``plan --kubeconfig``): read-only, one list per kind.

Every claim is read, whoever allocated it, because every allocation takes capacity from the
cards; slices are only this driver's.
"""

from __future__ import annotations

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.k8s import raw
from dra_driver.k8s.client import ClientConfigError, new_api_client
from dra_driver.k8s.objects import Object
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.errors import PlanInputError


def _items(listed: Object) -> tuple[Object, ...]:
    return tuple(listed.get("items") or ())


def live_cluster(names: DriverNames, kubeconfig: str) -> ClusterObjects:
    """List nodes, slices, classes and claims through ``kubeconfig``.

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
        return ClusterObjects(
            source=f"cluster {host}",
            nodes=_items(raw.call(core.list_node)),
            slices=_items(
                raw.call(resource.list_resource_slice, field_selector=f"spec.driver={names.driver}")
            ),
            classes=_items(raw.call(resource.list_device_class)),
            claims=_items(raw.call(resource.list_resource_claim_for_all_namespaces)),
        )
