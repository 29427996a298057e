"""``gpushare-dra plan``: choose the cluster, read the workload, plan, return the report."""

from __future__ import annotations

from collections.abc import Callable

from dra_driver.api import DriverNames, Placement
from dra_driver.plan.cluster import ClusterObjects
from dra_driver.plan.errors import PlanInputError
from dra_driver.plan.inventory import inventory_cluster, read_plan_inventory
from dra_driver.plan.live import live_cluster
from dra_driver.plan.planner import make_plan
from dra_driver.plan.render import render
from dra_driver.plan.settings import PlanSettings
from dra_driver.plan.workload import load_workload


def _cluster(names: DriverNames, settings: PlanSettings, flags: PlanSettings) -> ClusterObjects:
    """Return the cluster of ``--inventory`` or ``--kubeconfig``: exactly one of them.

    ``flags`` holds only what the command line gave. A flag beats an environment variable,
    because KUBECONFIG is often set in a shell for kubectl: ``--inventory x`` with it set
    plans on the inventory.
    """
    inventory, kubeconfig = settings.inventory, settings.kubeconfig
    if inventory and kubeconfig:
        if bool(flags.inventory) == bool(flags.kubeconfig):
            raise PlanInputError("give either --inventory or --kubeconfig, not both")
        inventory, kubeconfig = flags.inventory, flags.kubeconfig
    if inventory:
        found, source, quotas = read_plan_inventory(inventory, names)
        return inventory_cluster(
            names, found, source, shared=settings.consumable_capacity, quotas=quotas
        )
    if kubeconfig:
        return live_cluster(names, kubeconfig)
    raise PlanInputError("give --inventory FILE|NAME (a fake GPU inventory) or --kubeconfig FILE")


def run(
    names: DriverNames,
    settings: PlanSettings,
    flags: PlanSettings,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, bool]:
    """Plan; return the report in the chosen format and whether anything would be refused.

    Raise :class:`PlanInputError` for input that cannot be used; a failing API server
    raises :class:`~dra_driver.k8s.errors.ApiError`.
    """
    if settings.workload is None:
        raise PlanInputError("--workload FILE is required")
    workload = load_workload(settings.workload)
    cluster = _cluster(names, settings, flags)
    policies = list(Placement) if settings.policy == "both" else [Placement(settings.policy)]
    plan = make_plan(names, cluster, workload, policies, progress, preemption=settings.preemption)
    return render(plan, settings.output, summary=settings.summary), plan.refused
