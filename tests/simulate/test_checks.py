"""Expectations on hand-made snapshots: each says what was expected and what it saw instead."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from gpushare_simulator.simulate.checks import (
    DifferentCards,
    KernelsAre,
    PodIs,
    QuotaIs,
    Refused,
    SameCard,
    StepFacts,
    Undisturbed,
)
from gpushare_simulator.simulate.cudawork import TaskFact
from gpushare_simulator.simulate.observe import PodFact, QuotaFact, ShareFact, Snapshot

from dra_driver.usage.model import PublishedCard

GIB = 1024**3


def t4(device: str, uuid: str, pci_bus_id: str) -> PublishedCard:
    """Return one of node-2's T4 cards as its slice publishes it."""
    return PublishedCard("node-2", device, uuid, "", pci_bus_id, Fraction(100), Fraction(15 * GIB))


CARD_0 = t4("gpu-0", "GPU-aaaaaaaa-1", "0000:00:08.0")
CARD_1 = t4("gpu-1", "GPU-bbbbbbbb-2", "0000:00:09.0")


def running(name: str, card: PublishedCard | None = CARD_0, cores: int = 40, **env: str) -> PodFact:
    share = ShareFact(f"ns/{name}-gpu", "gpu", card, Fraction(cores), Fraction(5 * GIB),
                      "burst-share", "online", f"uid-{name}")  # fmt: skip
    return PodFact("ns", name, f"Pod/{name}", "Running", "node-2", None, (share,), {"c": env})


def facts(*pods: PodFact, before: Snapshot | None = None, **refused: str) -> StepFacts:
    return StepFacts(
        Snapshot(pods, ()), before, {k.replace("__", "/"): v for k, v in refused.items()}
    )


def test_pod_is_holds_when_everything_matches() -> None:
    """Phase, node, share, config and the listed variables all match: no failure."""
    check = PodIs("a", "Running", "node-2", "40", "5Gi", "burst-share", "online",
                  env={"CUDA_DEVICE_SM_LIMIT_0": "40"})  # fmt: skip
    assert check.failures(facts(running("a", CUDA_DEVICE_SM_LIMIT_0="40"))) == []


def test_pod_is_names_each_difference() -> None:
    """A wrong node, cores and variable are each reported with the value seen."""
    check = PodIs("a", "Running", "node-1", cores="30", env={"CUDA_DEVICE_SM_LIMIT_0": "30"})
    assert check.failures(facts(running("a", CUDA_DEVICE_SM_LIMIT_0="40"))) == [
        "pod a: expected on node node-1, got node-2",
        "pod a: expected 30 cores, got 40",
        "pod a: expected CUDA_DEVICE_SM_LIMIT_0=30, got CUDA_DEVICE_SM_LIMIT_0=40",
    ]


def test_pod_is_reports_a_wrong_phase_with_the_reason() -> None:
    """A pod expected to run that waits is reported with why it waits."""
    waiting = PodFact("ns", "a", "Pod/a", "Pending", None, "no card with 100 cores", (), {})
    assert PodIs("a", "Running").failures(facts(waiting)) == [
        "pod a: expected Running, got Pending (no card with 100 cores)"
    ]
    assert PodIs("b", "Running").failures(facts(waiting)) == [
        "pod b: expected Running, but there is no such pod"
    ]


def test_pod_is_checks_the_pending_reason() -> None:
    """The reason must contain the expected words."""
    waiting = PodFact("ns", "a", "Pod/a", "Pending", None, "a claim is being deleted", (), {})
    assert PodIs("a", "Pending", reason="no card").failures(facts(waiting)) == [
        "pod a: expected the reason to say 'no card', got 'a claim is being deleted'"
    ]


def test_pod_is_checks_the_newest_warnings_reason() -> None:
    """event="QuotaExceeded" holds for that event only; another is named in the failure."""
    held = PodFact("ns", "a", "Pod/a", "Pending", None, "GpuShareQuota ns/gpu: ...", (), {},
                   "QuotaExceeded")  # fmt: skip
    failed = dataclasses.replace(held, reason="no card", event="FailedAllocation")
    check = PodIs("a", "Pending", event="QuotaExceeded", reason="GpuShareQuota ns/gpu")
    assert check.failures(facts(held)) == []
    assert check.failures(facts(failed)) == [
        "pod a: expected the reason to say 'GpuShareQuota ns/gpu', got 'no card'",
        "pod a: expected a QuotaExceeded event, the newest warning is 'FailedAllocation'",
    ]
    assert check.describe() == (
        "pod a is Pending with a QuotaExceeded event because 'GpuShareQuota ns/gpu'"
    )


def quota(used: dict[str, str], exceeded: str | None) -> StepFacts:
    """Return facts holding quota gpu (100 cores, 10Gi) with the status the controller wrote."""
    fact = QuotaFact("ns", "gpu", {"cores": "100", "memory": "10Gi"}, used, exceeded)
    return StepFacts(Snapshot((), (), quotas=(fact,)), None, {})


def test_quota_is_compares_the_written_status_as_quantities() -> None:
    """10240Mi is 10Gi; a different use, no status yet, or Exceeded True are each named."""
    check = QuotaIs("gpu", {"cores": "100", "memory": "10Gi"})
    assert check.failures(quota({"cores": "100", "memory": "10240Mi"}, "False")) == []
    assert check.failures(quota({"cores": "50", "memory": "10Gi"}, "True")) == [
        "GpuShareQuota gpu: expected cores used 100, status says 50",
        "GpuShareQuota gpu: expected Exceeded False, status says True",
    ]
    assert check.failures(quota({}, None)) == [
        "GpuShareQuota gpu: expected cores used 100, status says nothing",
        "GpuShareQuota gpu: expected memory used 10Gi, status says nothing",
        "GpuShareQuota gpu: expected Exceeded False, status says nothing",
    ]
    assert QuotaIs("other", {}).failures(quota({}, None)) == [
        "GpuShareQuota other: expected it, but there is no such quota"
    ]
    assert check.describe() == "GpuShareQuota gpu has used cores 100, memory 10Gi, within its hard"


def test_same_card_and_different_cards() -> None:
    """Two pods on one card pass SameCard and fail DifferentCards, naming the cards."""
    together = facts(running("a"), running("b"))
    apart = facts(running("a"), running("b", CARD_1))
    assert SameCard(("a", "b")).failures(together) == []
    assert DifferentCards(("a", "b")).failures(apart) == []
    assert SameCard(("a", "b")).failures(apart) == [
        "expected a, b on one card, got a on node-2/gpu-0 (0000:00:08.0), "
        "b on node-2/gpu-1 (0000:00:09.0)"
    ]
    assert DifferentCards(("a", "b")).failures(together) == [
        "expected a, b on different cards, got a on node-2/gpu-0 (0000:00:08.0), "
        "b on node-2/gpu-0 (0000:00:08.0)"
    ]


def test_same_card_fails_for_an_unplaced_pod() -> None:
    """A pod without a card never counts as sharing one."""
    assert SameCard(("a", "b")).failures(facts(running("a"), running("b", None))) != []


def test_refused_needs_the_field_and_the_words() -> None:
    """A created object, or a refusal that does not name the field, fails."""
    check = Refused("ResourceClaim/x", "spec.devices.config[0]", "Unknown field")
    good = "admission webhook denied: spec.devices.config[0].opaque.parameters.y: Unknown field"
    assert check.failures(facts(ResourceClaim__x=good)) == []
    assert check.failures(facts()) == [
        "expected ResourceClaim/x to be refused at creation, but it was created"
    ]
    assert check.failures(facts(ResourceClaim__x="quota exceeded")) == [
        "ResourceClaim/x was refused, but the message lacks 'spec.devices.config[0]' and "
        "'Unknown field': quota exceeded"
    ]


def test_undisturbed_compares_with_the_step_before() -> None:
    """Same share and environment: undisturbed; a moved share or a new env is reported."""
    before = Snapshot((running("a", X="1"),), ())
    assert Undisturbed("a").failures(facts(running("a", X="1"), before=before)) == []
    moved = Undisturbed("a").failures(facts(running("a", CARD_1, X="1"), before=before))
    assert moved == [
        "pod a: was disturbed: its share moved: a on node-2/gpu-0 (0000:00:08.0) before, "
        "a on node-2/gpu-1 (0000:00:09.0) now"
    ]
    assert Undisturbed("a").failures(facts(running("a", X="2"), before=before)) == [
        "pod a: was disturbed: its containers' environment changed"
    ]
    assert Undisturbed("a").failures(facts(before=before)) == [
        "pod a: was disturbed: Running before, gone now"
    ]


def work(held: bool, limited: bool = True, *changes: tuple[float, str]) -> StepFacts:
    task = TaskFact("batch-0", True, held, limited, 40, 0, 0, changes)
    return StepFacts(Snapshot((), (), (task,)), None, {})


def test_kernels_are_checks_the_state_and_the_limit() -> None:
    """Held or running and SM limit on or off are each checked, and each miss is named."""
    assert KernelsAre("batch-0", held=True).failures(work(True)) == []
    assert KernelsAre("batch-0", held=True).failures(work(False)) == [
        "batch-0: expected its kernels held, they are running"
    ]
    assert KernelsAre("batch-0", held=False, limited=False).failures(work(False, True)) == [
        "batch-0: expected its SM limit off (bursting), it is on"
    ]
    assert KernelsAre("other", held=False).failures(work(False)) == [
        "other: expected CUDA work in the pod, but it runs none"
    ]


def test_kernels_are_times_the_change_against_its_bound() -> None:
    """A change within the bound holds; a late one says how late; a missing one says so."""
    check = KernelsAre("batch-0", held=True, became="held", within=1.5)
    assert check.failures(work(True, True, (0.9, "held"))) == []
    assert check.failures(work(True, True, (2.3, "held"))) == [
        "batch-0: it became held 2.3 s after the step's actions, expected within 1.5 s"
    ]
    assert check.failures(work(True, True)) == [
        "batch-0: expected it to become held in this step; it did not"
    ]
    assert check.describe() == "batch-0's kernels are held (held within 1.5 s)"
