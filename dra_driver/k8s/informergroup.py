"""Several informers that a component starts, stops and waits for as one."""

from __future__ import annotations

from dra_driver.k8s.informer import Informer


class InformerGroup:
    """Informers a component starts, stops and waits for together.

    ``borrowed`` informers belong to another part of the process, which starts and stops
    them: the group only waits for them, and counts as synced once they are too.
    """

    def __init__(self, *informers: Informer, borrowed: tuple[Informer, ...] = ()) -> None:
        self.informers = informers
        self._borrowed = borrowed

    def start(self) -> None:
        """Start every informer of the group's own."""
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        """Stop every informer of the group's own."""
        for informer in self.informers:
            informer.request_stop()  # all at once: each may wait out a request
        for informer in self.informers:
            informer.stop()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until every informer, borrowed ones too, has listed once (``timeout`` each)."""
        return all(informer.wait_synced(timeout) for informer in self._read())

    @property
    def synced(self) -> bool:
        """Whether every informer, borrowed ones too, has listed once (readiness)."""
        return all(informer.synced for informer in self._read())

    def _read(self) -> tuple[Informer, ...]:
        return (*self.informers, *self._borrowed)
