"""What a finished workload must not leave behind, and waiting until it has gone.

:func:`leftovers` lists claims still allocated or carrying our finalizer, and CDI specs or
checkpoint entries of ours on any node; :func:`controller_cards_taken` lists the cards the
controller's own metrics still count as partly allocated.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.api import DriverNames
from dra_driver.k8s import objects, raw
from gpushare_simulator.harness import invariants
from gpushare_simulator.harness.cluster import FakeCluster


def leftovers(cluster: FakeCluster, names: DriverNames) -> list[str]:
    """Return what is left of finished workloads, one line each; ``[]`` when clean.

    A claim of any namespace, allocated or carrying our finalizer; a CDI spec or checkpoint
    entry of ours on any node.
    """
    found = []
    resource = client.ResourceV1Api(cluster.api)
    for claim in raw.call(resource.list_resource_claim_for_all_namespaces)["items"]:
        where = f"claim {claim['metadata']['namespace']}/{claim['metadata']['name']}"
        if objects.status(claim).get("allocation"):
            found.append(f"{where} is still allocated")
        if names.finalizer in (claim["metadata"].get("finalizers") or []):
            found.append(f"{where} still has the finalizer {names.finalizer}")
    for node in cluster.inventory.nodes:
        dirs = cluster.node_dirs(node.name)
        files = invariants.node_files(dirs.cdi, dirs.plugins / names.driver, names)
        found += [f"CDI spec {spec} on {node.name}" for spec in sorted(files.specs)]
        found += [f"checkpoint entry {uid} on {node.name}" for uid in sorted(files.entries)]
    return found


def controller_cards_taken(url: str, nodes: int) -> list[str]:
    """Return each card the controller's metrics at ``url`` count as partly allocated.

    Also a line when the metrics cover fewer than ``nodes`` nodes: a card the controller does
    not know is no card it could call free.
    """
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the caller names its own metrics URL
        text = response.read().decode()
    taken: dict[str, list[str]] = {}
    seen_nodes = set()
    for family in text_string_to_metric_families(text):
        if family.name != "gpushare_controller_card_allocated":
            continue
        for sample in family.samples:
            seen_nodes.add(sample.labels["node"])
            if sample.value:
                card = f"card {sample.labels['node']}/{sample.labels['device']}"
                taken.setdefault(card, []).append(f"{sample.value:g} {sample.labels['capacity']}")
    found = [f"{card}: {', '.join(amounts)} taken" for card, amounts in sorted(taken.items())]
    if len(seen_nodes) < nodes:
        found.append(f"the controller's metrics show {len(seen_nodes)} of {nodes} nodes' cards")
    return found


def wait_clean(check: Callable[[], list[str]], timeout: float) -> tuple[list[str], float]:
    """Poll ``check`` until it finds nothing; return the last findings and the seconds taken."""
    start = time.monotonic()
    found = check()
    while found and time.monotonic() - start < timeout:
        time.sleep(0.25)
        found = check()
    return found, time.monotonic() - start
