"""Fault injection for reliability tests: errors, delays and dropped connections on chosen requests.

Usage::

    faults = server.faults
    fault = faults.inject(verb="update", resource="resourceclaims/status", status=409, times=1)
    faults.inject(resource="resourceslices", delay=0.5)              # slow every slice request
    faults.inject(when=lambda r: r.method == "PATCH", status=500, probability=0.3, seed=7)
    faults.inject(verb="create", resource="pods", status=500, after=True)  # done, answer lost
    faults.inject(verb="list", drop=True)                            # close without answering
    faults.inject(verb="update", resource="pods", hang=True, times=1)   # never answer
    faults.inject(verb="watch", resource="pods", hang=True)          # a watch that stays silent
    fault.hits; fault.remove(); server.faults.clear()

A fault matches on ``verb`` (get, list, watch, create, update, patch, delete, deletecollection),
``resource`` (``pods``, ``resourceclaims/status``, ``pods/binding`` ...), ``namespace``,
``name``, ``agent`` (a prefix of the client's User-Agent: one component's requests) and an
optional predicate ``when(RequestInfo)``. ``status`` answers a Status with that
code (409 is a real Conflict, 429/503 carry ``Retry-After``); ``delay`` sleeps first; ``drop``
closes the connection without a response; ``hang`` keeps the connection open and never answers
(a watch gets its response headers, then neither events nor bookmarks), until the client gives
up or the server stops: what a request on a dead connection looks like. ``after=True`` runs the
request and then fails its response (the write happened, the client does not know; with
``hang``, the write happened and the answer never comes). ``times`` bounds how often it fires.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gpushare_simulator.harness.apiserver import errors
from gpushare_simulator.harness.apiserver.routing import RequestInfo


@dataclass(eq=False)
class Fault:
    """One injected fault; see the module documentation."""

    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    agent: str | None = None
    when: Callable[[RequestInfo], bool] | None = None
    status: int | None = None
    message: str = "injected fault"
    delay: float = 0.0
    drop: bool = False
    hang: bool = False
    after: bool = False
    times: int | None = None
    probability: float = 1.0
    seed: int | None = None
    hits: int = 0
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)
    owner: Faults | None = field(default=None, repr=False, compare=False)

    def matches(self, request: RequestInfo, agent: str = "") -> bool:
        """Whether this fault applies to ``request`` (ignoring ``times`` and ``probability``)."""
        return (
            (self.agent is None or agent.startswith(self.agent))
            and (self.verb is None or self.verb == request.verb)
            and (self.resource is None or self.resource == request.resource)
            and (self.namespace is None or self.namespace == request.namespace)
            and (self.name is None or self.name == request.name)
            and (self.when is None or self.when(request))
        )

    def error(self, request: RequestInfo) -> errors.ApiError:
        """Return the error this fault answers with."""
        code = self.status or 500
        if code == 409 and request.rtype is not None:  # noqa: PLR2004
            return request.rtype.conflict(request.name)
        return errors.from_code(code, self.message)

    def remove(self) -> None:
        """Stop injecting this fault."""
        if self.owner is not None:
            self.owner.remove(self)


class Faults:
    """The set of active faults of one server; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def inject(
        self,
        *,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        agent: str | None = None,
        when: Callable[[RequestInfo], bool] | None = None,
        status: int | None = None,
        message: str = "injected fault",
        delay: float = 0.0,
        drop: bool = False,
        hang: bool = False,
        after: bool = False,
        times: int | None = None,
        probability: float = 1.0,
        seed: int | None = None,
    ) -> Fault:
        """Add a fault (see the module documentation) and return it."""
        fault = Fault(
            verb=verb, resource=resource, namespace=namespace, name=name, agent=agent, when=when,
            status=status, message=message, delay=delay, drop=drop, hang=hang, after=after,
            times=times, probability=probability, seed=seed,
        )  # fmt: skip
        if seed is not None:
            fault.rng.seed(seed)
        fault.owner = self
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        """Remove one fault."""
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        """Remove every fault."""
        with self._lock:
            self._faults.clear()

    def pick(self, request: RequestInfo, *, after: bool, agent: str = "") -> Fault | None:
        """Return the first fault firing for ``request`` in phase ``after``, counting its hit."""
        with self._lock:
            for fault in self._faults:
                if fault.after != after or not fault.matches(request, agent):
                    continue
                if fault.times is not None and fault.hits >= fault.times:
                    continue
                if fault.probability < 1.0 and fault.rng.random() >= fault.probability:
                    continue
                fault.hits += 1
                return fault
        return None
