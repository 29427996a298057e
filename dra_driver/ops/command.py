"""Run ``cleanup`` and ``status`` against a cluster: the API calls, the output, the exit code."""

from __future__ import annotations

import sys
import time
from typing import Final, TextIO

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.k8s import raw
from dra_driver.k8s.client import ClientConfigError, TimedApiClient, tool_api_client
from dra_driver.k8s.errors import ApiError, ForbiddenError, NotFoundError
from dra_driver.ops.cleanup import Cleaner, CleanupError
from dra_driver.ops.nominations import victims_to_read
from dra_driver.ops.settings import CleanupSettings, StatusSettings
from dra_driver.ops.status import cluster_status, render
from dra_driver.settings import as_document

EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2


def _items(listed: dict[str, object]) -> list[dict[str, object]]:
    items = listed.get("items")
    return list(items) if isinstance(items, list) else []


def _api_client(
    command: str, kubeconfig: str | None, context: str | None, err: TextIO
) -> TimedApiClient | None:
    """Return a client found as kubectl finds its cluster; ``None`` after saying why not."""
    try:
        return tool_api_client(kubeconfig, context, command)
    except ClientConfigError as exc:
        print(f"gpushare-dra {command}: error: {exc}", file=err)
        return None


def _quotas(
    api_client: client.ApiClient, names: DriverNames
) -> tuple[list[dict[str, object]], str]:
    """List every GpuShareQuota; none, and why, where they cannot be listed.

    A 404 is a cluster without the CRD (no quota to show, nothing to say); a 403 is an
    account that may read the rest but not the quotas, which the view says.
    """
    custom = client.CustomObjectsApi(api_client)
    group, version = names.quota_group_version
    try:
        listed = raw.call(custom.list_cluster_custom_object, group, version, names.quota_plural)
    except NotFoundError:
        return [], ""
    except ForbiddenError as exc:
        return [], f"cannot list {names.quota_plural}.{group}, quotas not shown: {exc}"
    return _items(listed), ""


def _victims(
    core: client.CoreV1Api, names: DriverNames, claims: list[dict[str, object]]
) -> tuple[list[dict[str, object]], bool]:
    """Read the pods that nominations evict; ``False`` when pods may not be read.

    One get each: they run on nodes, so the list of pods without a node lacks them. A pod not
    found is gone.
    """
    found = []
    for namespace, name in victims_to_read(names, claims):
        try:
            found.append(raw.call(core.read_namespaced_pod, name, namespace))
        except NotFoundError:
            continue
        except ForbiddenError:
            return [], False
    return found, True


def cleanup(names: DriverNames, settings: CleanupSettings) -> int:
    """Wait for the driver's pods to go, then remove its finalizers and gates; print a report."""
    out, err = sys.stdout, sys.stderr
    if settings.wait_for_pods and not settings.namespace:
        print("gpushare-dra cleanup: error: --wait-for-pods needs --namespace", file=err)
        return EXIT_USAGE
    api_client = _api_client("cleanup", settings.kubeconfig, settings.context, err)
    if api_client is None:
        return EXIT_USAGE
    with api_client:
        cleaner = Cleaner(api_client, names)
        try:
            if settings.wait_for_pods and settings.namespace:
                cleaner.wait_for_pods(
                    settings.namespace, settings.wait_for_pods, settings.wait_timeout
                )
            report = cleaner.run(dry_run=settings.dry_run)
        except CleanupError as exc:
            print(f"gpushare-dra cleanup: error: {exc}", file=err)
            return EXIT_FAILURE
        except ApiError as exc:
            print(f"gpushare-dra cleanup: error: the API server failed: {exc}", file=err)
            return EXIT_FAILURE
    if settings.output == "table":
        print(report.text(names), file=out)
    else:
        print(as_document(report.to_json(), settings.output), file=out)
    return 0


def status(names: DriverNames, settings: StatusSettings) -> int:
    """Print the cards, what holds them, the quotas, nominations and waiting pods; read-only."""
    out, err = sys.stdout, sys.stderr
    api_client = _api_client("status", settings.kubeconfig, settings.context, err)
    if api_client is None:
        return EXIT_USAGE
    with api_client:
        resource, core = client.ResourceV1Api(api_client), client.CoreV1Api(api_client)
        try:
            quotas, quota_problem = _quotas(api_client, names)
            claims = _items(raw.call(resource.list_resource_claim_for_all_namespaces))
            victims, victims_read = _victims(core, names, claims)
            view = cluster_status(
                names,
                slices=_items(
                    raw.call(
                        resource.list_resource_slice, field_selector=f"spec.driver={names.driver}"
                    )
                ),
                claims=claims,
                # Only pods not on a node yet: the ones on a card are named by their claims.
                pods=[
                    *_items(
                        raw.call(core.list_pod_for_all_namespaces, field_selector="spec.nodeName=")
                    ),
                    *victims,
                ],
                events=_items(
                    raw.call(
                        core.list_event_for_all_namespaces,
                        field_selector="involvedObject.kind=Pod,type=Warning",
                    )
                ),
                quotas=quotas,
                quota_problems=[quota_problem] if quota_problem else [],
                now=time.time(),
                victims_read=victims_read,
            )
        except ApiError as exc:
            print(f"gpushare-dra status: error: the API server failed: {exc}", file=err)
            return EXIT_FAILURE
    print(render(view, settings.output), file=out)
    return 0
