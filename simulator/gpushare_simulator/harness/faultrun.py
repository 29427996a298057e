"""A reliability run: real components killed and restarted under API faults, then invariants.

The controller and one kubelet plugin per node run as real processes against a
:class:`~gpushare_simulator.harness.cluster.FakeCluster` (its kubelets prepare through the plugins'
sockets). Each cycle creates gated pods with quarter- and half-card shares, deletes some older
ones, and SIGKILLs a random component at a random moment (often mid-allocation or
mid-prepare), restarting it at once. Meanwhile the API server answers a fraction of requests
with 409 Conflicts, 500s (some after the write happened), dropped connections, slow answers,
dropped watches, and compactions that expire every watch; it holds some of the components'
requests and watches open without ever answering, and now and then black-holes every
connection they have open (a partition). The components run with short API timeouts (1 s,
watches renewed after 3 s), so each of those costs one timeout.

A component that exits on its own is restarted, as the kubelet restarts a container: a leader
that cannot renew its Lease in time (a partition, a hung request) exits on purpose, and a run
where both replicas did so and stayed down would wait for a controller that never comes. Any
other exit is a violation. At the end the faults stop, every component is running, the run
waits until every live pod runs and every deleted pod's claim is gone, and
:func:`gpushare_simulator.harness.invariants.check` judges the final state.
``controllers=2`` runs two replicas without leader election, so only optimistic concurrency
stands between them and a double allocation; ``leader_elect`` runs them as the chart does,
the leader writing allocation and finalizer together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

from kubernetes import client

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.api.classes import default_device_classes
from dra_driver.k8s import raw
from dra_driver.k8s.client import USER_AGENT_PREFIX
from dra_driver.k8s.errors import ApiError, ConflictError, NotFoundError
from dra_driver.k8s.objects import Object
from dra_driver.nvml.inventory import dump_inventory, parse_inventory
from gpushare_simulator.harness import invariants, workload
from gpushare_simulator.harness.apiserver.faults import Fault
from gpushare_simulator.harness.apiserver.routing import RequestInfo
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.processes import ComponentProcess, start_controller, start_plugin

T = TypeVar("T")

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
NAMESPACE: Final = "default"
SHARES: Final = {share.name: share for share in workload.SHARES if share.fraction < 1}
"""The share templates pods use: quarter and half cards (whole cards would crowd the run)."""
CARD_MEMORY: Final = 80 * 2**30
_DELETE_EVERY: Final = 3
"""Every third cycle deletes a third of the live pods."""
_COMPACTION_ODDS: Final = 0.3
"""Chance per cycle that the API server compacts, expiring every watch."""
_PARTITION_ODDS: Final = 0.2
"""Chance per cycle that every connection the components have open goes silent."""
TIMEOUTS: Final = ("--api-connect-timeout", "1", "--api-timeout", "1", "--watch-timeout", "3")
"""The components' API timeouts in a run: short, so a hang costs little of its time."""
_LOST_LEADERSHIP: Final = '"controller.leadership_lost"'
"""The log event of a controller that exits because its Lease ran out under it."""
_SHORT_LEASE: Final = ("--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "1")
"""Leader election with a Lease a killed leader's successor waits out in 4 s."""


@dataclasses.dataclass(frozen=True)
class FaultRunSettings:
    """The size of a run; the defaults are the bounded run of the test suite."""

    nodes: int = 2
    cards: int = 2
    cycles: int = 8
    pods_per_cycle: int = 3
    controllers: int = 1
    leader_elect: bool = False
    """Run the controllers leader-elected (the chart's default) with a short Lease."""
    api_faults: bool = True
    settle_seconds: float = 90.0
    seed: int = 0


@dataclasses.dataclass
class FaultRunReport:
    """What happened, and whether the final state is sound."""

    cycles: int = 0
    kills: Counter[str] = dataclasses.field(default_factory=Counter)
    exits: Counter[str] = dataclasses.field(default_factory=Counter)
    """Components that exited on their own (a leader that lost its Lease), then restarted."""
    faults: Counter[str] = dataclasses.field(default_factory=Counter)
    pods_created: int = 0
    pods_deleted: int = 0
    pods_running: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> Object:
        """Return the report as the JSON a benchmark line carries."""
        return {
            **dataclasses.asdict(self),
            "kills": dict(self.kills),
            "exits": dict(self.exits),
            "faults": dict(self.faults),
            "passed": not self.violations,
        }


def _inventory(settings: FaultRunSettings) -> str:
    return f"""
generate:
  nodes: {settings.nodes}
  namePrefix: fault-
  cardsPerNode: {settings.cards}
  card: {{productName: NVIDIA H100 80GB HBM3, memory: 80Gi, architecture: Hopper,
          cudaComputeCapability: "9.0", driverVersion: "550.54.15", numaNodes: 1}}
"""


def _retrying(call: Callable[[], T], attempts: int = 50) -> T:
    """Run one of the run's own API calls through the injected faults."""
    for _ in range(attempts - 1):
        try:
            return call()
        except (ApiError, ConflictError):
            time.sleep(0.05)
    return call()


class FaultRun:
    """One run; :meth:`run` returns its report."""

    def __init__(self, settings: FaultRunSettings, work_dir: Path) -> None:
        self.settings = settings
        self.work_dir = work_dir
        self.rng = random.Random(settings.seed)  # noqa: S311 - reproducible runs, not secrets
        self.report = FaultRunReport()
        self.live: dict[str, int] = {}
        """Pod name -> quarter-card units it holds."""
        self.gone: list[str] = []
        self._inventory_file = work_dir / "inventory.yaml"
        inventory = parse_inventory(_inventory(settings))
        self._inventory_file.write_text(dump_inventory(inventory))
        self.cluster = FakeCluster(inventory, work_dir)
        self.components: dict[str, ComponentProcess] = {}
        self._faults: dict[str, Fault] = {}
        self._serial = 0
        self._unsettled: list[str] = []
        """What kept the cluster from settling at the last look."""

    # -- components -----------------------------------------------------------------------

    def _start(self, name: str) -> ComponentProcess:
        if name.startswith("controller"):
            if self.settings.leader_elect:
                # A killed leader's Lease runs out before anyone leads again: short, then.
                election = ["--leader-election-namespace", NAMESPACE, *_SHORT_LEASE]
                identity = ["--leader-election-identity", name]
                return start_controller(self.cluster, args=[*election, *identity, *TIMEOUTS])
            return start_controller(self.cluster, args=["--no-leader-elect", *TIMEOUTS])
        return start_plugin(
            self.cluster, name.removeprefix("plugin-"), self._inventory_file, args=TIMEOUTS
        )

    def _start_all(self) -> None:
        names = [f"plugin-{n.name}" for n in self.cluster.inventory.nodes]
        names += [f"controller-{i}" for i in range(self.settings.controllers)]
        for name in names:
            self.components[name] = self._start(name)
        for process in self.components.values():
            process.wait_ready(60)

    def _revive(self) -> None:
        """Restart every component that exited on its own, as the kubelet would.

        A controller that lost its leadership exits by design; any other exit is a bug.
        """
        for name, process in sorted(self.components.items()):
            status = process.process.poll()
            if status is None:
                continue
            output = process.output()
            if not (name.startswith("controller") and _LOST_LEADERSHIP in output):
                tail = "\n".join(output.splitlines()[-20:])
                self.report.violations.append(f"{name} exited with {status}:\n{tail}")
            self.report.exits[name.split("-")[0]] += 1
            self.components[name] = process.restart()

    def _kill_one(self) -> None:
        self._revive()
        name = self.rng.choice(sorted(self.components))
        time.sleep(self.rng.uniform(0.0, 0.8))
        self.components[name].kill()
        self.report.kills[name.split("-")[0]] += 1
        time.sleep(self.rng.uniform(0.0, 0.3))
        self.components[name] = self.components[name].restart()
        self.components[name].wait_ready(60)

    # -- faults -------------------------------------------------------------------------

    def _inject(self) -> None:
        inject = self.cluster.server.faults.inject
        seed = self.settings.seed
        not_watch: Callable[[RequestInfo], bool] = lambda r: r.verb != "watch"  # noqa: E731
        # Claims are written by patch, slices and Leases by update.
        write: Callable[[RequestInfo], bool] = lambda r: r.verb in ("update", "patch")  # noqa: E731
        self._faults = {
            "conflict": inject(
                verb="patch", resource="resourceclaims/status", status=409, probability=0.15,
                seed=seed,
            ),
            "server-error": inject(when=not_watch, status=500, probability=0.03, seed=seed + 1),
            "lost-answer": inject(
                when=write, status=500, after=True, probability=0.05, seed=seed + 2
            ),
            "dropped-request": inject(when=not_watch, drop=True, probability=0.01, seed=seed + 3),
            "slow": inject(delay=0.3, probability=0.03, seed=seed + 4),
            "dropped-watch": inject(verb="watch", drop=True, probability=0.05, seed=seed + 5),
            # Only the components' requests: the harness's own actors wait 30 s on a hang.
            "hung-request": inject(
                agent=USER_AGENT_PREFIX, when=not_watch, hang=True, probability=0.01,
                seed=seed + 6,
            ),
            "hung-watch": inject(
                agent=USER_AGENT_PREFIX, verb="watch", hang=True, probability=0.05,
                seed=seed + 8,
            ),
        }  # fmt: skip

    def _inject_once(self) -> dict[str, Fault]:
        """Hangs that fire exactly once, whenever a component first makes such a request.

        The random faults can miss a short run; these cannot, and they stay until the end, so
        one that comes only while the run settles still fires.
        """
        inject = functools.partial(self.cluster.server.faults.inject, agent=USER_AGENT_PREFIX)
        return {
            # A claim allocation is stored and its answer never comes.
            "hung-write-answer": inject(
                verb="patch", resource="resourceclaims/status", hang=True, after=True, times=1
            ),
            # A watch gets its headers, then neither events nor bookmarks.
            "hung-first-watch": inject(verb="watch", hang=True, times=1),
        }

    def _stop_faults(self) -> None:
        for kind, fault in self._faults.items():
            self.report.faults[kind] += fault.hits
            fault.remove()

    # -- workload -----------------------------------------------------------------------

    def _capacity(self) -> int:
        return self.settings.nodes * self.settings.cards * 4

    def _create_pods(self) -> None:
        core = client.CoreV1Api(self.cluster.api)
        for _ in range(self.settings.pods_per_cycle):
            template = self.rng.choice(sorted(SHARES))
            units = int(SHARES[template].fraction * 4)
            # Three quarters of the cards at most: every live pod must fit in the end.
            if sum(self.live.values()) + units > self._capacity() * 3 // 4:
                return
            self._serial += 1
            name = f"p{self._serial}"
            manifest = workload.PlannedPod(name, template=template).manifest(NAMES.scheduling_gate)
            _retrying(functools.partial(raw.call, core.create_namespaced_pod, NAMESPACE, manifest))
            self.live[name] = units
            self.report.pods_created += 1

    def _delete_pods(self) -> None:
        core = client.CoreV1Api(self.cluster.api)
        for name in self.rng.sample(sorted(self.live), len(self.live) // 3):
            with contextlib.suppress(NotFoundError):
                _retrying(functools.partial(raw.call, core.delete_namespaced_pod, name, NAMESPACE))
            del self.live[name]
            self.gone.append(name)
            self.report.pods_deleted += 1

    # -- the end ------------------------------------------------------------------------

    def _settled(self) -> bool:
        self._revive()
        core, resource = client.CoreV1Api(self.cluster.api), client.ResourceV1Api(self.cluster.api)
        pods = {
            p["metadata"]["name"]: p
            for p in raw.call(core.list_namespaced_pod, NAMESPACE).get("items") or []
        }
        running = [
            n for n in self.live if (pods.get(n, {}).get("status") or {}).get("phase") == "Running"
        ]
        self.report.pods_running = len(running)
        claims = raw.call(resource.list_namespaced_resource_claim, NAMESPACE).get("items") or []
        left = [f"pod {n} not running" for n in sorted(set(self.live) - set(running))]
        left += [f"deleted pod {n} still there" for n in self.gone if n in pods]
        left += [
            f"claim {claim['metadata']['name']} of deleted pod {ref['name']} still there "
            f"(finalizers {claim['metadata'].get('finalizers')}, "
            f"status {json.dumps(claim.get('status') or {}, sort_keys=True)})"
            for claim in claims
            for ref in claim["metadata"].get("ownerReferences") or []
            if ref["name"] in self.gone
        ]
        self._unsettled = left
        return not left

    def run(self) -> FaultRunReport:
        """Run every cycle, settle, check; the cluster and processes are stopped after."""
        started = time.monotonic()
        self.cluster.start()
        try:
            self.cluster.apply(default_device_classes(NAMES))
            self.cluster.apply(
                [workload.share_template(NAMES, s, CARD_MEMORY) for s in SHARES.values()],
                NAMESPACE,
            )
            once = self._inject_once() if self.settings.api_faults else {}
            self._start_all()
            if self.settings.api_faults:
                self._inject()
            for cycle in range(self.settings.cycles):
                self._create_pods()
                if cycle % _DELETE_EVERY == _DELETE_EVERY - 1:
                    self._delete_pods()
                if self.settings.api_faults and self.rng.random() < _COMPACTION_ODDS:
                    self.cluster.server.compact()
                    self.report.faults["expired-watches"] += 1
                if self.settings.api_faults and self.rng.random() < _PARTITION_ODDS:
                    silenced = self.cluster.server.blackhole(USER_AGENT_PREFIX)
                    self.report.faults["black-holed-connections"] += silenced
                self._kill_one()
                self.report.cycles += 1
            self._stop_faults()
            try:
                self.cluster.wait_for(
                    self._settled, "the cluster to settle", self.settings.settle_seconds
                )
            except TimeoutError as exc:
                # What is left says where to look: a pod, a deleted pod, or its claim.
                self.report.violations.append(f"{exc}: {'; '.join(self._unsettled)}")
            self.report.violations += invariants.check(self.cluster, NAMES)
            self.report.faults.update({kind: fault.hits for kind, fault in once.items()})
        finally:
            for process in self.components.values():
                process.kill()
            self.cluster.stop()
            self.report.seconds = round(time.monotonic() - started, 1)
        return self.report
