"""Expectations a scenario checks after a step, and how each explains a failure.

A check looks at the step's facts (the snapshot at the end of the step, the one at the end of
the step before, the objects the API server refused) and returns what did not hold, in words
that say what was expected and what happened instead; an empty list means it holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction
from typing import Protocol

from dra_driver.k8s.quantity import QuantityFormat, format_quantity, parse_quantity
from gpushare_simulator.simulate.observe import PodFact, ShareFact, Snapshot


@dataclasses.dataclass(frozen=True)
class StepFacts:
    """What a step's checks look at."""

    now: Snapshot
    before: Snapshot | None
    """At the end of the previous step; ``None`` for the first."""
    refused: Mapping[str, str]
    """``Kind/name`` of each document the API server refused -> its message."""


class Check(Protocol):
    """One expectation."""

    def describe(self) -> str:
        """Say what is expected, in one line."""
        ...

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold; empty when the expectation is met."""
        ...


def _card(share: ShareFact) -> str:
    if share.card is None:
        return "no card"
    return f"{share.card.node}/{share.card.device} ({share.card.pci_bus_id})"


def _amount(value: Fraction | None, fmt: QuantityFormat) -> str:
    return "all" if value is None else format_quantity(value, fmt)


@dataclasses.dataclass(frozen=True)
class PodIs:
    """A pod's phase and, where given, its node, share, config, environment or pending reason."""

    pod: str
    phase: str
    node: str | None = None
    cores: str | None = None
    memory: str | None = None
    isolation: str | None = None
    priority: str | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    reason: str | None = None
    """A part of the reason it does not run."""
    event: str | None = None
    """The reason of the newest warning event about it (``QuotaExceeded``)."""

    def describe(self) -> str:
        """Say what is expected, in one line."""
        parts = [f"pod {self.pod} is {self.phase}"]
        parts += [f"on {self.node}"] if self.node else []
        share = [f"{v} {k}" for k, v in (("cores", self.cores), ("memory", self.memory)) if v]
        parts += [f"with {', '.join(share)}"] if share else []
        parts += [f"{v}" for v in (self.isolation, self.priority) if v]
        parts += [f"{k}={v}" for k, v in self.env.items()]
        parts += [f"with a {self.event} event"] if self.event else []
        parts += [f"because {self.reason!r}"] if self.reason else []
        return " ".join(parts)

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold."""
        pod = facts.now.pod(self.pod)
        if pod is None:
            return [f"pod {self.pod}: expected {self.phase}, but there is no such pod"]
        if pod.phase != self.phase:
            why = f" ({pod.reason})" if pod.reason else ""
            return [f"pod {self.pod}: expected {self.phase}, got {pod.phase}{why}"]
        found = []
        if self.node is not None and pod.node != self.node:
            found.append(f"expected on node {self.node}, got {pod.node or 'no node'}")
        found += self._share_failures(pod)
        env = pod.merged_env()
        for key, value in self.env.items():
            if env.get(key) != value:
                got = f"{key}={env[key]}" if key in env else f"no {key}"
                found.append(f"expected {key}={value}, got {got}")
        if self.reason is not None and self.reason not in (pod.reason or ""):
            found.append(f"expected the reason to say {self.reason!r}, got {pod.reason!r}")
        if self.event is not None and pod.event != self.event:
            found.append(f"expected a {self.event} event, the newest warning is {pod.event!r}")
        return [f"pod {self.pod}: {problem}" for problem in found]

    def _share_failures(self, pod: PodFact) -> list[str]:
        found = []
        if not pod.shares and any((self.cores, self.memory, self.isolation, self.priority)):
            return ["expected a share of a card, got no claim of this driver"]
        for share in pod.shares:
            if self.cores is not None and share.cores != parse_quantity(self.cores):
                got = _amount(share.cores, QuantityFormat.DECIMAL)
                found.append(f"expected {self.cores} cores, got {got}")
            if self.memory is not None and share.memory != parse_quantity(self.memory):
                got = _amount(share.memory, QuantityFormat.BINARY)
                found.append(f"expected {self.memory} memory, got {got}")
            if self.isolation is not None and share.isolation != self.isolation:
                found.append(f"expected isolation {self.isolation}, got {share.isolation}")
            if self.priority is not None and share.priority != self.priority:
                found.append(f"expected priority {self.priority}, got {share.priority}")
        return found


def _cards_of(snapshot: Snapshot, pods: tuple[str, ...]) -> dict[str, list[ShareFact]]:
    return {
        name: list(pod.shares) if (pod := snapshot.pod(name)) is not None else [] for name in pods
    }


def _where(cards: Mapping[str, list[ShareFact]]) -> str:
    return ", ".join(
        f"{name} on {' + '.join(_card(s) for s in shares) or 'no card'}"
        for name, shares in cards.items()
    )


@dataclasses.dataclass(frozen=True)
class SameCard:
    """The pods' shares are all on one card (one PCI bus ID on one node)."""

    pods: tuple[str, ...]

    def describe(self) -> str:
        """Say what is expected, in one line."""
        return f"pods {', '.join(self.pods)} share one card"

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold."""
        cards = _cards_of(facts.now, self.pods)
        used = {(s.card.node, s.card.device) if s.card else None for v in cards.values() for s in v}
        if len(used) == 1 and None not in used and all(cards.values()):
            return []
        return [f"expected {', '.join(self.pods)} on one card, got {_where(cards)}"]


@dataclasses.dataclass(frozen=True)
class DifferentCards:
    """No two of the pods' shares are on the same card."""

    pods: tuple[str, ...]

    def describe(self) -> str:
        """Say what is expected, in one line."""
        return f"pods {', '.join(self.pods)} are on different cards"

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold."""
        cards = _cards_of(facts.now, self.pods)
        used = [(s.card.node, s.card.device) if s.card else None for v in cards.values() for s in v]
        if None not in used and len(set(used)) == len(used) == len(self.pods):
            return []
        return [f"expected {', '.join(self.pods)} on different cards, got {_where(cards)}"]


@dataclasses.dataclass(frozen=True)
class Refused:
    """Creating the document failed, with a message naming ``field`` and saying ``says``."""

    document: str
    field: str
    says: str

    def describe(self) -> str:
        """Say what is expected, in one line."""
        return f"{self.document} is refused: {self.field}: ...{self.says}..."

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold."""
        message = facts.refused.get(self.document)
        if message is None:
            return [f"expected {self.document} to be refused at creation, but it was created"]
        missing = [part for part in (self.field, self.says) if part not in message]
        if not missing:
            return []
        wanted = " and ".join(repr(part) for part in missing)
        return [f"{self.document} was refused, but the message lacks {wanted}: {message}"]


@dataclasses.dataclass(frozen=True)
class Undisturbed:
    """The pod runs as it did at the end of the previous step: same node, card, claim, env."""

    pod: str

    def describe(self) -> str:
        """Say what is expected, in one line."""
        return f"pod {self.pod} keeps running on the same card, claim and limits"

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold."""
        before = facts.before.pod(self.pod) if facts.before is not None else None
        now = facts.now.pod(self.pod)
        if before is None or before.phase != "Running":
            return [f"pod {self.pod}: was not running before this step"]
        if now is None or now.phase != "Running":
            phase = "gone" if now is None else now.phase
            return [f"pod {self.pod}: was disturbed: Running before, {phase} now"]
        found = []
        if now.node != before.node or now.shares != before.shares:
            found.append(
                f"its share moved: {_where({self.pod: list(before.shares)})} before, "
                f"{_where({self.pod: list(now.shares)})} now"
            )
        if now.env != before.env:
            found.append("its containers' environment changed")
        return [f"pod {self.pod}: was disturbed: {problem}" for problem in found]


@dataclasses.dataclass(frozen=True)
class Evicted:
    """Exactly ``count`` of the pods, all running before this step, are gone; the rest run on."""

    pods: tuple[str, ...]
    count: int = 1

    def describe(self) -> str:
        """Say what is expected, in one line."""
        return f"exactly {self.count} of {', '.join(self.pods)} evicted, the others undisturbed"

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold."""
        gone = [name for name in self.pods if facts.now.pod(name) is None]
        if len(gone) != self.count:
            return [
                f"expected {self.count} of {', '.join(self.pods)} evicted, got {gone or 'none'}"
            ]
        found = []
        for name in self.pods:
            if name not in gone:
                found += Undisturbed(name).failures(facts)
        return found


@dataclasses.dataclass(frozen=True)
class QuotaIs:
    """A GpuShareQuota's status, as the controller writes it: what is used, whether it is over."""

    quota: str
    used: Mapping[str, str]
    """Each resource named here has this ``status.used`` (compared as quantities)."""
    exceeded: bool = False

    def describe(self) -> str:
        """Say what is expected, in one line."""
        used = ", ".join(f"{resource} {value}" for resource, value in self.used.items())
        state = "over" if self.exceeded else "within"
        return f"GpuShareQuota {self.quota} has used {used}, {state} its hard"

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold."""
        quota = facts.now.quota(self.quota)
        if quota is None:
            return [f"GpuShareQuota {self.quota}: expected it, but there is no such quota"]
        found = []
        for resource, value in self.used.items():
            written = quota.used.get(resource)
            if written is None or parse_quantity(written) != parse_quantity(value):
                found.append(
                    f"expected {resource} used {value}, status says {written or 'nothing'}"
                )
        wanted = "True" if self.exceeded else "False"
        if quota.exceeded != wanted:
            found.append(f"expected Exceeded {wanted}, status says {quota.exceeded or 'nothing'}")
        return [f"GpuShareQuota {self.quota}: {problem}" for problem in found]


def _state(held: bool) -> str:
    return "held" if held else "running"


def _limit(limited: bool) -> str:
    return "on" if limited else "off (bursting)"


@dataclasses.dataclass(frozen=True)
class KernelsAre:
    """A pod's simulated CUDA work is held by the node monitor or runs, its SM limit on or off.

    With ``became``, that change (an event of the work: ``held``, ``resumed``, ``SM limit
    off`` ...) happened during the step, at most ``within`` seconds after its actions.
    """

    pod: str
    held: bool
    limited: bool | None = None
    became: str | None = None
    within: float = 0.0

    def describe(self) -> str:
        """Say what is expected, in one line."""
        text = f"{self.pod}'s kernels are {_state(self.held)}"
        text += f", SM limit {_limit(self.limited)}" if self.limited is not None else ""
        return text + (f" ({self.became} within {self.within:g} s)" if self.became else "")

    def failures(self, facts: StepFacts) -> list[str]:
        """Return what does not hold."""
        task = facts.now.task(self.pod)
        if task is None:
            return [f"{self.pod}: expected CUDA work in the pod, but it runs none"]
        found = []
        if task.held != self.held:
            found.append(f"expected its kernels {_state(self.held)}, they are {_state(task.held)}")
        if self.limited is not None and task.limited != self.limited:
            found.append(
                f"expected its SM limit {_limit(self.limited)}, it is {_limit(task.limited)}"
            )
        if self.became is not None and not found:
            times = [seconds for seconds, what in task.changes if what == self.became]
            if not times:
                found.append(f"expected it to become {self.became} in this step; it did not")
            elif times[-1] > self.within:
                found.append(
                    f"it became {self.became} {times[-1]:.1f} s after the step's actions, "
                    f"expected within {self.within:g} s"
                )
        return [f"{self.pod}: {problem}" for problem in found]
