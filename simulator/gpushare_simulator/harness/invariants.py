"""What must hold after any run, however many faults it took: checked on the final state.

Each check is a pure function of API objects and the nodes' files, returning violations as
sentences (empty: it holds), so a test can hand one a deliberately broken state and see it
caught. :func:`check` reads a :class:`~gpushare_simulator.harness.cluster.FakeCluster` and runs them
all:

- no card is over-committed: per capacity, the shares' ``consumedCapacity`` fits the card,
  and a card used whole (a result without a ``shareID``) has no other user;
- no share is allocated twice: a ``(device, shareID)`` appears in one claim only;
- every claim of ours that is allocated carries our finalizer, and no released claim does;
- every running pod's claims are prepared exactly once: one CDI spec and one completed
  checkpoint entry, on the pod's node and nowhere else;
- on every node, the CDI specs and the checkpoint entries name the same claims.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path

from kubernetes import client

from dra_driver.api import DriverNames
from dra_driver.cdi import spec_file_name
from dra_driver.k8s import objects, raw
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import parse_quantity
from dra_driver.structured.configshares import counted_claims, slice_capacities
from gpushare_simulator.harness.cluster import FakeCluster

Device = tuple[str, str]
"""``(pool, device)`` of one of our devices."""


@dataclasses.dataclass(frozen=True)
class NodeFiles:
    """What a kubelet plugin left on its node: CDI spec files and checkpoint entries."""

    specs: frozenset[str]
    """File names of this driver's CDI specs."""
    entries: Mapping[str, tuple[str, str]]
    """Claim UID -> (checkpoint state, spec file name)."""


def _results(claim: Object, driver: str) -> list[Object]:
    allocation = objects.status(claim).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if r.get("driver") == driver]


def _name(obj: Object) -> str:
    metadata = objects.metadata(obj)
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def overcommitted(claims: Iterable[Object], slices: Iterable[Object], driver: str) -> list[str]:
    """Cards whose shares exceed a capacity, or that someone uses whole beside others."""
    by_id = slice_capacities(slices, driver)
    capacities = {(pool, device): found for (_, pool, device), found in by_id.items()}
    used: dict[Device, Counter[str]] = {}
    users: dict[Device, list[tuple[str, bool]]] = {}
    # Shares sized by config on whole-only cards count as the shares they are.
    for claim in counted_claims(claims, DriverNames.for_driver(driver), by_id):
        for result in _results(claim, driver):
            device = (result["pool"], result["device"])
            whole = not result.get("shareID")
            users.setdefault(device, []).append((_name(claim), whole))
            totals = used.setdefault(device, Counter())
            for name, amount in (result.get("consumedCapacity") or {}).items():
                totals[name] += parse_quantity(str(amount))  # type: ignore[assignment]
    violations = []
    for device, holders in sorted(users.items()):
        if any(whole for _, whole in holders) and len(holders) > 1:
            names = ", ".join(name for name, _ in holders)
            violations.append(f"card {'/'.join(device)} is used whole and shared: {names}")
        for name, amount in sorted(used.get(device, Counter()).items()):
            capacity = capacities.get(device, {}).get(name)
            if capacity is None or Fraction(amount) > capacity.value:
                limit = "no such capacity" if capacity is None else capacity.text
                violations.append(
                    f"card {'/'.join(device)} is over-committed: {name} {amount} > {limit}"
                )
    return violations


def allocated_twice(claims: Iterable[Object], driver: str) -> list[str]:
    """Shares (device and shareID) that more than one result holds."""
    holders: dict[tuple[str, str, str], list[str]] = {}
    for claim in claims:
        for result in _results(claim, driver):
            if result.get("shareID"):
                key = (result["pool"], result["device"], result["shareID"])
                holders.setdefault(key, []).append(_name(claim))
    return [
        f"share {share} of card {pool}/{device} is allocated to {', '.join(names)}"
        for (pool, device, share), names in sorted(holders.items())
        if len(names) > 1
    ]


def finalizers(claims: Iterable[Object], names: DriverNames) -> list[str]:
    """Allocated claims of ours without our finalizer, and released claims still with it."""
    violations = []
    for claim in claims:
        has = names.finalizer in (objects.metadata(claim).get("finalizers") or [])
        allocated = bool(_results(claim, names.driver))
        if allocated and not has:
            violations.append(f"claim {_name(claim)} is allocated without {names.finalizer}")
        if has and not objects.status(claim).get("allocation"):
            violations.append(f"claim {_name(claim)} is released but keeps {names.finalizer}")
    return violations


def prepared_once(
    pods: Iterable[Object],
    claims: Iterable[Object],
    nodes: Mapping[str, NodeFiles],
    names: DriverNames,
) -> list[str]:
    """Return running pods whose claims are not prepared exactly once, on their own node."""
    by_name = {_name(claim): claim for claim in claims}
    violations = []
    for pod in pods:
        node = objects.spec(pod).get("nodeName")
        if objects.status(pod).get("phase") != "Running" or not node:
            continue
        namespace = pod["metadata"]["namespace"]
        for status in objects.status(pod).get("resourceClaimStatuses") or []:
            claim = by_name.get(f"{namespace}/{status.get('resourceClaimName')}")
            if claim is None or not _results(claim, names.driver):
                continue
            uid = claim["metadata"]["uid"]
            spec = spec_file_name(names, uid)
            holders = sorted(name for name, files in nodes.items() if spec in files.specs)
            entries = [name for name, files in nodes.items() if uid in files.entries]
            state = nodes[node].entries.get(uid, ("missing", ""))[0] if node in nodes else "?"
            if holders != [node] or entries != [node] or state != "PrepareCompleted":
                violations.append(
                    f"claim {_name(claim)} of running pod {_name(pod)} on {node}: specs on "
                    f"{holders or 'no node'}, checkpoint entries on {entries or 'no node'}, "
                    f"state on its node {state}"
                )
    return violations


def specs_match_checkpoint(nodes: Mapping[str, NodeFiles]) -> list[str]:
    """Specs without a checkpoint entry, entries without their spec, and unfinished entries."""
    violations = []
    for node, files in sorted(nodes.items()):
        recorded = {spec for _, spec in files.entries.values()}
        for spec in sorted(files.specs - recorded):
            violations.append(f"{node}: CDI spec {spec} has no checkpoint entry")
        for uid, (state, spec) in sorted(files.entries.items()):
            if spec not in files.specs:
                violations.append(f"{node}: checkpoint entry {uid} has no CDI spec {spec}")
            if state != "PrepareCompleted":
                violations.append(f"{node}: checkpoint entry {uid} is left in {state}")
    return violations


def node_files(cdi_root: Path, plugin_dir: Path, names: DriverNames) -> NodeFiles:
    """Read what the plugin of one node left behind."""
    prefix = f"{names.cdi_vendor}-{names.cdi_class}_"
    specs = (
        frozenset(p.name for p in cdi_root.glob(f"{prefix}*.json"))
        if cdi_root.exists()
        else frozenset()
    )
    checkpoint = plugin_dir / "checkpoint"
    entries: dict[str, tuple[str, str]] = {}
    if checkpoint.exists():
        for path in checkpoint.glob("*.json"):
            try:
                document = json.loads(path.read_text())
            except FileNotFoundError:
                continue  # unprepared between the listing and the read: not there any more
            # One file per prepare call; early builds of format 2 wrote one claim as "claim".
            for entry in document["claims"] if "claims" in document else [document["claim"]]:
                entries[entry["uid"]] = (entry["state"], entry["spec_file"])
    return NodeFiles(specs=specs, entries=entries)


def _items(listed: Object) -> list[Object]:
    return list(listed.get("items") or [])


def check(
    cluster: FakeCluster, names: DriverNames, nodes: Sequence[str] | None = None
) -> list[str]:
    """Run every check against the cluster's API state and its nodes' files."""
    core, resource = client.CoreV1Api(cluster.api), client.ResourceV1Api(cluster.api)
    claims = _items(raw.call(resource.list_resource_claim_for_all_namespaces))
    slices = _items(raw.call(resource.list_resource_slice))
    pods = _items(raw.call(core.list_pod_for_all_namespaces))
    files = {
        node: node_files(
            cluster.node_dirs(node).cdi, cluster.node_dirs(node).plugins / names.driver, names
        )
        for node in (nodes if nodes is not None else [n.name for n in cluster.inventory.nodes])
    }
    return [
        *overcommitted(claims, slices, names.driver),
        *allocated_twice(claims, names.driver),
        *finalizers(claims, names),
        *prepared_once(pods, claims, files, names),
        *specs_match_checkpoint(files),
    ]
