"""The eight acceptance scenarios (docs/scenarios.md) as data: manifest, steps, expectations.

Each scenario applies its manifest of ``deploy/examples/`` in steps (a step applies the
documents labelled ``step: <name>``, or all that are left) and then checks what a cluster
operator would check by hand. The numbers are those of the built-in inventory
``qgpu-runbook``: node-1 with one 15 GiB Tesla T4 (15360 MiB), node-2 with two. The example
files name no node, so each :class:`Apply` names the node of that inventory its pods are held
to: where a pod lands among the nodes is then the scenario's choice, not the placement
policy's, and which card it gets on that node is what the scenario checks.

Where a scenario is about what happens on the GPU (priority, bursting), simulated CUDA
processes write HAMi-core regions as the library would and the kubelet plugin's node monitor
acts on them (one pass a second); the checks allow each change a little more than the passes
it needs: one to suspend, two for the online work's last mark to run out before a resume.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from gpushare_simulator.simulate.actions import Action, Apply, Busy, Complete, Delete, Idle
from gpushare_simulator.simulate.checks import (
    Check,
    DifferentCards,
    Evicted,
    KernelsAre,
    PodIs,
    QuotaIs,
    Refused,
    SameCard,
    Undisturbed,
)


@dataclasses.dataclass(frozen=True)
class Step:
    """Actions, then the expectations that must hold once the cluster has settled."""

    title: str
    actions: tuple[Action, ...]
    checks: tuple[Check, ...] = ()


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One acceptance scenario."""

    name: str
    title: str
    manifest: str
    """File name in ``deploy/examples/``."""
    steps: tuple[Step, ...]


_T4: Final = {"memory": "15Gi"}
_ONE_PASS: Final = 1.5
_TWO_PASSES: Final = 2.5
_HELD_RETRY: Final = 1.0
"""A held launch looks again only after a second, as the library does."""


def _env(memory_mib: int, cores: int, **more: str) -> dict[str, str]:
    return {
        "CUDA_DEVICE_MEMORY_LIMIT_0": f"{memory_mib}m",
        "CUDA_DEVICE_SM_LIMIT_0": str(cores),
        **more,
    }


WHOLE_CARD: Final = Scenario(
    "whole-card",
    "a claim without a capacity request gets a whole card; a second one waits for it",
    "whole-card.yaml",
    (
        Step(
            "train-1 takes the one card of node-1; train-2 waits with the controller's reason",
            (Apply(node="node-1"),),
            (
                PodIs("train-1-0", "Running", "node-1", "100", **_T4, env=_env(15360, 100)),
                PodIs("train-2-0", "Pending", reason="no card with 100 cores, 15Gi memory free"),
            ),
        ),
        Step(
            "train-1 completes: its card is released and train-2 runs on it",
            (Complete("Job/train-1"),),
            (
                PodIs("train-1-0", "Succeeded"),
                PodIs("train-2-0", "Running", "node-1", "100", **_T4, env=_env(15360, 100)),
            ),
        ),
    ),
)

SHARING: Final = Scenario(
    "sharing",
    "two shares of 5Gi with 40 and 30 cores run on one card at once",
    "sharing.yaml",
    (
        Step(
            "both services run on node-1's card, each told its own share",
            (Apply(node="node-1"),),
            (
                PodIs("infer-a-0", "Running", "node-1", "40", "5Gi", env=_env(5120, 40)),
                PodIs("infer-b-0", "Running", "node-1", "30", "5Gi", env=_env(5120, 30)),
                SameCard(("infer-a-0", "infer-b-0")),
            ),
        ),
    ),
)

PLACEMENT: Final = Scenario(
    "placement",
    "binpack puts two shares on one card, spread on two; cores: 100 is a whole card",
    "placement.yaml",
    (
        Step(
            "placement: binpack: both replicas on one card of node-2",
            (Apply("binpack", node="node-2"),),
            (
                PodIs("infer-binpack-0", "Running", "node-2", "40", "5Gi"),
                PodIs("infer-binpack-1", "Running", "node-2", "40", "5Gi"),
                SameCard(("infer-binpack-0", "infer-binpack-1")),
            ),
        ),
        Step(
            "placement: spread: the replicas on different cards of node-2",
            (Delete("Deployment/infer-binpack"), Apply("spread", node="node-2")),
            (
                PodIs("infer-spread-0", "Running", "node-2", "40", "5Gi"),
                PodIs("infer-spread-1", "Running", "node-2", "40", "5Gi"),
                DifferentCards(("infer-spread-0", "infer-spread-1")),
            ),
        ),
        Step(
            "cores: 100 and no memory request: all of node-1's card",
            (Apply("whole", node="node-1"),),
            (PodIs("trainer", "Running", "node-1", "100", **_T4, env=_env(15360, 100)),),
        ),
    ),
)

ISOLATION: Final = Scenario(
    "isolation",
    "fixed-share, burst-share and best-effort: always, unless alone, and never limited",
    "isolation.yaml",
    (
        Step(
            "three 30-core 4Gi shares on node-1's card, one per isolation policy",
            (Apply(node="node-1"),),
            (
                PodIs(
                    "fixed-share", "Running", "node-1", "30", "4Gi", isolation="fixed-share",
                    env=_env(4096, 30, GPU_CORE_UTILIZATION_POLICY="force"),
                ),
                PodIs(
                    "burst-share", "Running", "node-1", "30", "4Gi", isolation="burst-share",
                    env=_env(4096, 30, GPU_CORE_UTILIZATION_POLICY="default"),
                ),
                PodIs(
                    "best-effort", "Running", "node-1", "30", "4Gi", isolation="best-effort",
                    env=_env(4096, 30, GPU_CORE_UTILIZATION_POLICY="disable"),
                ),
                SameCard(("fixed-share", "burst-share", "best-effort")),
            ),
        ),
        Step(
            "burst-share is the only busy share on the card: its SM limit is lifted",
            (Busy("burst-share"),),
            (
                KernelsAre(
                    "burst-share", held=False, limited=False, became="SM limit off",
                    within=_ONE_PASS,
                ),
            ),
        ),
        Step(
            "fixed-share gets busy too: two busy shares of one priority, so the burst ends",
            (Busy("fixed-share"),),
            (
                KernelsAre(
                    "burst-share", held=False, limited=True, became="SM limit on",
                    within=_ONE_PASS,
                ),
                KernelsAre("fixed-share", held=False, limited=True),
            ),
        ),
        Step(
            "best-effort gets busy too: it is never limited, and nobody is held",
            (Busy("best-effort"),),
            (
                KernelsAre("best-effort", held=False, limited=False),
                KernelsAre("burst-share", held=False, limited=True),
                KernelsAre("fixed-share", held=False, limited=True),
            ),
        ),
    ),
)  # fmt: skip

ONLINE_OFFLINE: Final = Scenario(
    "online-offline",
    "online and offline work share a card: offline is held while online is busy",
    "online-offline.yaml",
    (
        Step(
            "the online service and the offline Job share node-1's card",
            (Apply(node="node-1"),),
            (
                PodIs(
                    "infer-0", "Running", "node-1", "60", "5Gi", priority="online",
                    env=_env(5120, 60, CUDA_TASK_PRIORITY="0"),
                ),
                PodIs(
                    "batch-0", "Running", "node-1", "40", "8Gi", priority="offline",
                    env=_env(8192, 40, CUDA_TASK_PRIORITY="1"),
                ),
                SameCard(("infer-0", "batch-0")),
            ),
        ),
        Step(
            "batch-0 computes alone: as the only busy share it may use the idle card",
            (Busy("batch-0"),),
            (
                KernelsAre(
                    "batch-0", held=False, limited=False, became="SM limit off", within=_ONE_PASS
                ),
            ),
        ),
        Step(
            "infer-0 gets busy: the node monitor holds batch-0's kernels, memory kept",
            (Busy("infer-0"),),
            (
                KernelsAre("batch-0", held=True, became="held", within=_ONE_PASS),
                KernelsAre("infer-0", held=False, limited=False),
            ),
        ),
        Step(
            "infer-0 goes idle: batch-0 is resumed and runs again",
            (Idle("infer-0"),),
            (
                KernelsAre("batch-0", held=False, became="resumed", within=_TWO_PASSES),
                KernelsAre(
                    "batch-0", held=False, became="kernels run",
                    within=_TWO_PASSES + _HELD_RETRY,
                ),
            ),
        ),
    ),
)  # fmt: skip

_CONFIG: Final = "spec.spec.devices.config[0].opaque.parameters"

BAD_INPUT: Final = Scenario(
    "bad-input",
    "bad requests are refused at creation, naming the field; running work goes on",
    "bad-input.yaml",
    (
        Step(
            "a good share runs on node-1",
            (Apply("running", node="node-1"),),
            (PodIs("infer-0", "Running", "node-1", "30", "5Gi", env=_env(5120, 30)),),
        ),
        Step(
            "four bad objects are each refused; the running pod keeps its share",
            (Apply("bad"),),
            (
                Refused(
                    "ResourceClaimTemplate/too-much-memory",
                    "spec.spec.devices.requests[0].exactly.capacity.requests[memory]",
                    "must be at most 15Gi",
                ),
                Refused(
                    "ResourceClaim/bad-isolation",
                    "spec.devices.config[0].opaque.parameters.isolation",
                    'Unsupported value: "fast"',
                ),
                Refused(
                    "ResourceClaimTemplate/unknown-field", f"{_CONFIG}.priorty", "Unknown field"
                ),
                Refused("ResourceClaimTemplate/too-large", f"{_CONFIG}:", "Too long"),
                Undisturbed("infer-0"),
            ),
        ),
    ),
)

_AT_CEILING: Final = QuotaIs("gpu", {"cores": "100", "memory": "10Gi"})

QUOTA: Final = Scenario(
    "quota",
    "a namespace's GpuShareQuota: shares up to its ceiling run, the next waits for room",
    "quota.yaml",
    (
        Step(
            "a quota of 100 cores and 10Gi, two shares of 50 cores and 5Gi: at the ceiling",
            (Apply("ceiling", node="node-2"),),
            (
                PodIs("infer-a-0", "Running", "node-2", "50", "5Gi"),
                PodIs("infer-b-0", "Running", "node-2", "50", "5Gi"),
                _AT_CEILING,
            ),
        ),
        Step(
            "a third share would go over the quota: it waits, though node-2 has room for it",
            (Apply("over", node="node-2"),),
            (
                PodIs(
                    "infer-c-0", "Pending", event="QuotaExceeded",
                    reason="GpuShareQuota quota/gpu: cores used 100, asked 50, hard 100",
                ),
                Undisturbed("infer-a-0"),
                _AT_CEILING,
            ),
        ),
        Step(
            "infer-a is deleted: its share is released and infer-c runs in the room it left",
            (Delete("Deployment/infer-a"),),
            (PodIs("infer-c-0", "Running", "node-2", "50", "5Gi"), _AT_CEILING),
        ),
    ),
)  # fmt: skip

PREEMPTION: Final = Scenario(
    "preemption",
    "an online pod that fits on no card has as few offline pods evicted as it takes",
    "preemption.yaml",
    (
        Step(
            "two offline shares of 40 cores and 6Gi on node-1's one card: 20 cores, 3Gi left",
            (Apply("batch", node="node-1"),),
            (
                PodIs("batch-1", "Running", "node-1", "40", "6Gi", priority="offline"),
                PodIs("batch-2", "Running", "node-1", "40", "6Gi", priority="offline"),
            ),
        ),
        Step(
            "an online share of 60 cores and 8Gi: one batch pod is evicted, the service runs",
            (Apply("serving", node="node-1"),),
            (
                PodIs("serving-0", "Running", "node-1", "60", "8Gi", priority="online"),
                Evicted(("batch-1", "batch-2")),
            ),
        ),
    ),
)  # fmt: skip

SCENARIOS: Final = (
    WHOLE_CARD, SHARING, PLACEMENT, ISOLATION, ONLINE_OFFLINE, BAD_INPUT, QUOTA, PREEMPTION,
)  # fmt: skip
