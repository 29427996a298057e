"""A card source that reads one node's cards from a YAML inventory file, for tests and demos.

The file is read again by :meth:`FakeCardSource.discover` whenever it changed, so a test changes
the cards a running plugin sees (a card added, removed, or marked ``health: Unhealthy``) by
rewriting it; an unchanged file is not parsed again (a 100-node inventory takes 0.4 s, every
5 s, in every plugin of a simulated cluster).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from dra_driver.nvml.inventory import InventoryError, load_inventory
from dra_driver.nvml.source import Discovery, DiscoveryError

__all__ = ["FakeCardSource"]

_SHOWN_NODES: Final = 10


class FakeCardSource:
    """The cards of node ``node_name`` in the inventory file at ``inventory_path``.

    ``discover`` raises :class:`DiscoveryError` with the inventory's own message when the file
    cannot be read or decoded, and one naming the node and the file's nodes when the node is
    not in it. ``start`` discovers once, so a wrong path or node name fails at start-up as a
    missing NVML would; ``stop`` does nothing.
    """

    def __init__(self, inventory_path: Path, node_name: str) -> None:
        self.inventory_path = Path(inventory_path)
        self.node_name = node_name
        self._read: tuple[tuple[int, int, int, int], Discovery] | None = None

    def start(self) -> None:
        """Check that the file reads and holds the node; raise :class:`DiscoveryError` if not."""
        self.discover()

    def stop(self) -> None:
        """Do nothing: nothing was acquired."""

    def version(self) -> str:
        """Return ``"fake"``."""
        return "fake"

    def running_pids(self) -> frozenset[int] | None:
        """Fake cards run nothing NVML could list: unknown, so no slot is judged dead."""
        return None

    def discover(self) -> Discovery:
        """Return this node's cards as the file says now, sorted by PCI bus ID."""
        try:
            stat = self.inventory_path.stat()
        except OSError:
            stat = None  # load_inventory says why
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns) if stat else None
        if identity is not None and self._read is not None and self._read[0] == identity:
            return self._read[1]
        try:
            inventory = load_inventory(self.inventory_path)
        except InventoryError as error:
            raise DiscoveryError(str(error)) from error
        for node in inventory.nodes:
            if node.name == self.node_name:
                found = Discovery(cards=node.cards)
                if identity is not None:
                    self._read = (identity, found)
                return found
        names = [node.name for node in inventory.nodes]
        shown = ", ".join(names[:_SHOWN_NODES])
        if len(names) > _SHOWN_NODES:
            shown += f", ... ({len(names)} nodes)"
        raise DiscoveryError(
            f"{self.inventory_path}: no node {self.node_name!r} in the inventory; "
            f"its nodes are: {shown or '(none)'}"
        )
