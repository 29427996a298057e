"""The node monitor: HAMi-core's priority and burst, acted on for the claims prepared here.

Every period it lists the region files in the host directory of each prepared ``hami-core``
claim, reads the few fields the rules need (:mod:`dra_driver.hamicore.regionfile`), decides
for all of them together (:mod:`dra_driver.hamicore.feedback`) and writes back the fields that
changed. What a region says about itself is trusted only where it cannot hurt anyone else:
its priority and its cards come from the claim as the API server allocated it, so a container
cannot raise its own priority or reach into another card by writing its region.

A region in a format this driver does not know, or one that is not a plain region file, is
never written: it is logged once and counted. On :meth:`RegionMonitor.stop` every task it
suspended is resumed and every SM limit enforced again, the library's own starting state; a
monitor killed instead re-decides everything in its first period after the restart.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Final

from dra_driver.api import Backend
from dra_driver.cdi.backends import PRIORITY_LEVEL
from dra_driver.hamicore.feedback import Decision, RegionState, decide, released
from dra_driver.hamicore.region import RegionError
from dra_driver.hamicore.regionfile import RegionFile, RegionRead
from dra_driver.kubeletplugin.entries import ClaimEntry, ClaimRef, ClaimState, ShareInfo
from dra_driver.logging import carry, get_logger
from dra_driver.metrics.watchdog import Heartbeat, stall_reason

log = get_logger(__name__)

DEFAULT_PERIOD: Final = 1.0
REGION_SUFFIX: Final = ".cache"
_STALL_PERIODS: Final = 30
"""Periods a tick may take before the watchdog calls the monitor stuck."""


@dataclasses.dataclass(frozen=True)
class MonitoredClaim:
    """A prepared claim whose regions the monitor looks after, and its share."""

    ref: ClaimRef
    info: ShareInfo

    @property
    def uid(self) -> str:
        """The claim's UID: its regions live in a directory named by it."""
        return self.ref.uid


@dataclasses.dataclass(frozen=True)
class ClaimActivity:
    """One claim's use of one card in the last period, over all its regions."""

    claim: MonitoredClaim
    uuid: str
    memory_used: int
    memory_limit: int
    sm_util: int
    suspended: bool


@dataclasses.dataclass
class _Open:
    region: RegionFile
    claim: MonitoredClaim
    read: RegionRead | None = None


class RegionMonitor:
    """Runs the feedback rules over the regions of ``claims()`` every ``period`` seconds."""

    name = "region-monitor"

    def __init__(
        self,
        claims_dir: Path,
        claims: Callable[[], Iterable[MonitoredClaim]],
        *,
        period: float = DEFAULT_PERIOD,
        clock: Callable[[], float] = time.monotonic,
        running_pids: Callable[[], Collection[int] | None] = lambda: None,
    ) -> None:
        self._dir, self._claims, self.period = claims_dir, claims, period
        self._running_pids = running_pids
        """The host PIDs with work on the cards (NVML), to tell a killed process from a live
        one; ``None`` where unknown (fake cards): then every slot with a PID counts."""
        self._open: dict[Path, _Open] = {}
        self._refused: dict[tuple[Path, tuple[int, int] | None], str] = {}
        self._usage: list[ClaimActivity] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat = Heartbeat(clock)

    # -- what others read --------------------------------------------------------------------

    def usage(self) -> list[ClaimActivity]:
        """Each monitored claim's use of each of its cards, as of the last period."""
        with self._lock:
            return list(self._usage)

    def refused(self) -> Mapping[str, int]:
        """How many region files are left alone now, by reason (``version``, ``magic`` ...)."""
        with self._lock:
            counts: dict[str, int] = {}
            for kind in self._refused.values():
                counts[kind] = counts.get(kind, 0) + 1
            return counts

    def silent_seconds(self) -> float:
        """Seconds since the last period ended."""
        return self._heartbeat.read()[0]

    def stalled(self) -> str | None:
        """Why the monitor counts as stuck (a period that never ends), or ``None``."""
        thread = self._thread
        if thread is None or self._stop.is_set():
            return None
        if not thread.is_alive():
            return "its thread ended"
        silent, doing = self._heartbeat.read()
        return stall_reason(silent, _STALL_PERIODS * self.period, doing or "watching regions")

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Decide once at once (a restart lifts a dead monitor's suspensions), then every period."""
        self._heartbeat.beat("watching regions")
        self._thread = threading.Thread(target=carry(self._run), name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop, then resume every suspended task and enforce every SM limit again."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10 * self.period)
            self._thread = None
        with self._lock:
            for entry in self._open.values():
                self._release(entry)
                entry.region.close()
            self._open.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
            except Exception:  # the monitor must outlive any one bad period
                log.exception("monitor.tick_failed")
            self._heartbeat.beat("watching regions")
            self._stop.wait(max(0.0, self.period - (time.monotonic() - started)))

    # -- one period --------------------------------------------------------------------------

    def tick(self) -> list[Decision]:
        """Read every region, decide, write what changed; return the decisions."""
        with self._lock:
            claims = {claim.uid: claim for claim in self._claims()}
            self._refresh(claims, self._running_pids())
            states = [self._state(path, entry) for path, entry in self._open.items() if entry.read]
            decisions = decide(states)
            for decision in decisions:
                entry = self._open[Path(decision.key)]
                try:
                    entry.region.write(decision.recent_kernel, decision.utilization_switch)
                except (RegionError, OSError) as exc:
                    self._forget(Path(decision.key), str(exc))
            self._usage = self._summarise(claims, decisions)
        return decisions

    def _refresh(
        self, claims: Mapping[str, MonitoredClaim], running: Collection[int] | None
    ) -> None:
        """Open new regions, drop gone or replaced ones, and read every open one."""
        present: set[Path] = set()
        for claim in claims.values():
            for path in self._region_paths(claim.uid):
                present.add(path)
                self._read(path, claim, running)
        for path in set(self._open) - present:
            self._open.pop(path).region.close()
        for key in [k for k in self._refused if k[0] not in present]:
            del self._refused[key]

    def _region_paths(self, uid: str) -> list[Path]:
        try:
            with os.scandir(self._dir / uid) as entries:
                return [
                    Path(entry.path)
                    for entry in entries
                    if entry.name.endswith(REGION_SUFFIX) and not entry.name.startswith(".")
                ]
        except OSError:
            return []  # not created yet, or the claim was just unprepared

    def _read(self, path: Path, claim: MonitoredClaim, running: Collection[int] | None) -> None:
        entry = self._open.get(path)
        try:
            identity = _identity(path)
            if entry is not None and entry.region.identity != identity:
                entry.region.close()  # replaced under the same name: another file now
                entry = None
            if entry is None:
                if (path, identity) in self._refused:
                    return  # said once already; a new file under this name gets a new look
                entry = _Open(RegionFile.open(path), claim)
                self._open[path] = entry
            entry.claim, entry.read = claim, entry.region.read(running)
            self._refused.pop((path, identity), None)
        except RegionError as exc:
            if exc.kind == "uninitialised":
                if entry is not None:
                    entry.read = None  # being set up by the library: look again next period
                return
            self._refuse(path, exc.kind, str(exc))
        except OSError as exc:
            self._refuse(path, "unreadable", str(exc))

    def _refuse(self, path: Path, kind: str, why: str) -> None:
        entry = self._open.pop(path, None)
        if entry is not None:
            entry.region.close()
        try:
            identity: tuple[int, int] | None = _identity(path)
        except OSError:
            identity = None
        if (path, identity) not in self._refused:
            log.warning("monitor.region_refused", region=str(path), reason=kind, error=why)
        self._refused[(path, identity)] = kind

    def _forget(self, path: Path, why: str) -> None:
        log.warning("monitor.region_write_failed", region=str(path), error=why)
        entry = self._open.pop(path, None)
        if entry is not None:
            entry.region.close()

    @staticmethod
    def _state(path: Path, entry: _Open) -> RegionState:
        read, info = entry.read, entry.claim.info
        assert read is not None  # noqa: S101 - filtered by the caller
        allocated = {card.uuid for card in info.cards}
        # Only the claim's own cards count: a region may name any UUID it likes.
        cards = tuple(card.uuid for card in read.cards if card.uuid in allocated)
        return RegionState(
            key=str(path),
            uuids=cards,
            priority=PRIORITY_LEVEL[info.priority],
            recent_kernel=read.recent_kernel,
            utilization_switch=read.utilization_switch,
            busy=frozenset(c.uuid for c in read.cards if c.sm_util > 0 and c.uuid in allocated),
        )

    def _summarise(
        self, claims: Mapping[str, MonitoredClaim], decisions: Iterable[Decision]
    ) -> list[ClaimActivity]:
        suspended = {Path(d.key) for d in decisions if d.suspended}
        # (claim UID, card UUID) -> memory used, SM utilisation, suspended, over its regions
        totals: dict[tuple[str, str], tuple[int, int, bool]] = {}
        for path, entry in self._open.items():
            for read in entry.read.cards if entry.read is not None else ():
                key = (entry.claim.uid, read.uuid)
                used, util, held = totals.get(key, (0, 0, False))
                totals[key] = (
                    used + read.memory_used,
                    util + read.sm_util,
                    held or path in suspended,
                )
        usage = []
        for claim in claims.values():
            for card in claim.info.cards:
                used, util, held = totals.get((claim.uid, card.uuid), (0, 0, False))
                usage.append(
                    ClaimActivity(
                        claim=claim,
                        uuid=card.uuid,
                        memory_used=used,
                        memory_limit=card.memory_bytes,
                        sm_util=util,
                        suspended=held,
                    )
                )
        return usage

    def _release(self, entry: _Open) -> None:
        """Leave a region as the library starts it: running, limits enforced."""
        try:
            read = entry.region.read()
            state = RegionState("", (), 0, read.recent_kernel, read.utilization_switch)
            entry.region.write(*released(state))
        except (RegionError, OSError) as exc:
            log.warning("monitor.release_failed", region=str(entry.region.path), error=str(exc))


def _identity(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_dev, info.st_ino


def monitored_claims(entries: Iterable[ClaimEntry]) -> list[MonitoredClaim]:
    """Return the prepared ``hami-core`` claims among checkpoint ``entries``.

    An entry without a share, one whose share the checkpoint could not derive when it loaded
    it, is left alone.
    """
    claims = []
    for entry in entries:
        share = entry.share
        if (
            entry.state is ClaimState.PREPARE_COMPLETED
            and share is not None
            and share.backend is Backend.HAMI_CORE
        ):
            claims.append(MonitoredClaim(ClaimRef(entry.namespace, entry.uid, entry.name), share))
    return claims
