"""The narrow interface through which the kubelet plugin learns a node's cards.

A :class:`CardSource` is NVML on a real node (:mod:`dra_driver.nvml.real`) or a YAML inventory
in tests and simulations (:mod:`dra_driver.nvml.fake`). Either way the plugin gets a
:class:`Discovery`: the cards it could read, sorted by PCI bus ID, and one :class:`CardError`
per card it could not. A card that cannot be read is never fatal; a source that cannot work at
all (no NVML library, initialisation refused) raises :class:`DiscoveryError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from dra_driver.nvml.card import Card

__all__ = ["CardError", "CardSource", "Discovery", "DiscoveryError"]


class DiscoveryError(RuntimeError):
    """A whole card source failed; the message says what to check (driver root, library)."""


@dataclass(frozen=True)
class CardError:
    """One card that could not be read. ``index`` and ``uuid`` are set when they were known."""

    index: int | None
    uuid: str | None
    message: str

    def __str__(self) -> str:
        index = "card ?" if self.index is None else f"card {self.index}"
        who = f"{index} ({self.uuid})" if self.uuid else index
        return f"{who}: {self.message}"


@dataclass(frozen=True)
class Discovery:
    """What one discovery found: the readable cards, sorted by PCI bus ID, and the errors.

    The cards are sorted on construction, so every source yields them in the order CUDA
    numbers them under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    """

    cards: tuple[Card, ...]
    errors: tuple[CardError, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cards", tuple(sorted(self.cards, key=lambda c: c.pci_bus_id)))
        object.__setattr__(self, "errors", tuple(self.errors))


class CardSource(Protocol):
    """Where a node's cards come from.

    ``start`` acquires the source (loads and initialises NVML, starts health watching) and
    raises :class:`DiscoveryError` if it cannot; ``stop`` releases it and returns promptly.
    ``discover`` is cheap enough to call every few seconds and reflects the cards' current
    health; ``version`` is the driver version, or ``"fake"``.
    """

    def start(self) -> None:
        """Acquire the source; raise :class:`DiscoveryError` naming what to check if it fails."""

    def stop(self) -> None:
        """Release the source and stop any background work; returns promptly."""

    def discover(self) -> Discovery:
        """Return the node's cards now, with their health, and the cards that failed to read."""

    def version(self) -> str:
        """Return the NVIDIA driver version (``"550.54.15"``), or ``"fake"``."""

    def running_pids(self) -> frozenset[int] | None:
        """Return the host PIDs with work on the node's cards now, or ``None`` if unknown."""
