"""One physical GPU as NVML describes it: the card every part of the driver reads.

The real NVML backend and the fake inventory both build :class:`Card` objects, and both go
through the same checks (:mod:`dra_driver.nvml.fields`), so a card read from a YAML file obeys
the rules of one read from the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from dra_driver.nvml.fields import CARD_FIELDS, FieldValueError, Health, child

__all__ = ["Card", "Health", "InventoryError", "set_checked"]

_MIB: Final = 2**20


class InventoryError(ValueError):
    """An inventory was refused: ``<source>: <path>: <problem>``.

    ``source`` is the file (or the class, for an object built in code), ``path`` the YAML path
    of the offending value (``nodes[1].cards[0].memory``; empty for the whole document) and
    ``problem`` says what is wrong and what is allowed.
    """

    def __init__(self, source: str, path: str, problem: str) -> None:
        self.source = source
        self.path = path
        self.problem = problem
        super().__init__(f"{source}: {path}: {problem}" if path else f"{source}: {problem}")


def set_checked(
    obj: object, attribute: str, yaml_name: str, convert: Callable[[object], object]
) -> None:
    """Check and normalise one attribute of a frozen dataclass while it is built."""
    try:
        object.__setattr__(obj, attribute, convert(getattr(obj, attribute)))
    except FieldValueError as problem:
        path = yaml_name if problem.key is None else child(yaml_name, problem.key)
        raise InventoryError(type(obj).__name__, path, str(problem)) from None


@dataclass(frozen=True, kw_only=True)
class Card:
    """One physical GPU as NVML describes it. Construction checks and normalises every field.

    ``pci_bus_id`` is stored as ``0000:3b:00.0`` (NVML's ``00000000:3B:00.0`` is accepted);
    ``memory_bytes`` also takes a quantity string such as ``"80Gi"``. A bad field raises
    :class:`InventoryError` naming the field by its YAML name.
    """

    uuid: str
    product_name: str
    memory_bytes: int
    pci_bus_id: str
    minor: int
    index: int
    architecture: str
    cuda_compute_capability: str
    driver_version: str
    numa_node: int | None = None
    health: Health = Health.HEALTHY
    health_message: str | None = None

    def __post_init__(self) -> None:
        for spec in CARD_FIELDS:
            set_checked(self, spec.attribute, spec.yaml_name, spec.convert)

    @property
    def shareable_memory_bytes(self) -> int:
        """Memory the card offers to claims: its bytes rounded down to a whole MiB.

        Memory is requested on a 1Mi grid and the scheduler rounds requests up to it, so an
        off-grid capacity could never be handed out whole (see ``dra_driver.publishing.slices``).
        """
        return self.memory_bytes - self.memory_bytes % _MIB
