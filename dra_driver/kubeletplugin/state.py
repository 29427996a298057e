"""Prepared claims on this node: checkpointed, idempotent, and safe to crash in.

Order of a prepare: per-claim host directory -> CDI spec (atomic) -> the call's checkpoint
file (durable) -> answer. Unprepare removes in the reverse order. A crash before the
checkpoint leaves specs and directories that no entry names: start-up reconciliation removes
them (the kubelet, never answered, asks again), unless a damaged checkpoint file may have
named them. A completed claim whose spec vanished or was cut short (the spec is not fsynced:
its entry holds it) gets it rewritten, byte for byte: the kubelet will not ask again for a
claim it thinks prepared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Final

from dra_driver.api import Backend, DriverNames, EffectiveConfig
from dra_driver.cdi import (
    HostPaths,
    UnsafeNameError,
    atomic_write_bytes,
    canonical_json,
    check_claim_uid,
    ensure_directory,
    read_regular,
    spec_bytes,
    spec_file_name,
)
from dra_driver.cdi.backends import HAMI_LIBRARY_PATH
from dra_driver.k8s.errors import ApiError, NotFoundError
from dra_driver.k8s.objects import Object
from dra_driver.kubeletplugin.checkpoint import (
    Checkpoint,
    CorruptCheckpointError,
    UnknownCheckpointVersionError,
)
from dra_driver.kubeletplugin.claims import ClaimError, prepare_claim
from dra_driver.kubeletplugin.devicestatus import DeviceStatus
from dra_driver.kubeletplugin.entries import (
    ClaimEntry,
    ClaimRef,
    ClaimState,
    PreparedDevice,
    ShareInfo,
)
from dra_driver.kubeletplugin.locking import file_lock
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.logging import bound, get_logger, pool_initializer
from dra_driver.nvml.card import Card

log = get_logger(__name__)


# Test hook for crash tests: the process stops here (and says so in a file) until killed.
PAUSE_ENV: Final = "GPUSHARE_TEST_PAUSE_AT"
_READERS: Final = 8
"""Claims read from the API server at once while a batch is prepared."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The answer for one claim: devices, or an error the kubelet will retry on."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclasses.dataclass(frozen=True, eq=False)
class _Plan:
    """A new claim of a prepare batch: what to checkpoint and write."""

    ref: ClaimRef
    entry: ClaimEntry
    spec: str
    """The CDI spec's text (:func:`~dra_driver.cdi.canonical_json`)."""
    devices: tuple[PreparedDevice, ...]
    host: HostPaths
    config: EffectiveConfig
    share: ShareInfo
    statuses: tuple[DeviceStatus, ...]


def _content(path: Path) -> bytes | None:
    """Return the file's bytes, ``None`` if it is missing or not a readable regular file."""
    try:
        return read_regular(path)
    except (OSError, ValueError):
        return None


def pause_point(step: str) -> None:
    """Stop here forever if a crash test asked to (``GPUSHARE_TEST_PAUSE_AT=<step>:<file>``)."""
    wanted = os.environ.get(PAUSE_ENV, "")
    if wanted.partition(":")[0] == step:
        Path(wanted.partition(":")[2]).write_text(step)
        while True:
            time.sleep(3600)


class ClaimPreparer:
    """Prepares and unprepares claims; one call at a time (the gRPC layer serialises)."""

    def __init__(
        self,
        names: DriverNames,
        node_name: str,
        paths: NodePaths,
        *,
        get_claim: Callable[[str, str], Object],
        cards: Callable[[], Sequence[Card]],
        default_backend: Backend,
        on_prepared: Callable[[ClaimRef, Sequence[DeviceStatus]], None] | None = None,
    ) -> None:
        self._names, self._node = names, node_name
        self._on_prepared = on_prepared
        self._paths = paths
        self._get_claim, self._cards = get_claim, cards
        self._default_backend = default_backend
        self._checkpoint = Checkpoint(paths.plugin_dir)
        self._lock = threading.Lock()
        self._node_lock = paths.plugin_dir / "serialize.lock"

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Own the claim state: this process's lock, the node-wide lock, the file's content.

        Another plugin Pod (rolling update) may have written the checkpoint since we last read
        it, so every batch starts from the file.
        """
        with self._lock, file_lock(self._node_lock):
            # A corrupt format-1 checkpoint is moved aside and logged loudly by load(); what is
            # on disk is then reconciled against the empty state. An unknown format is raised:
            # nothing may be changed on its behalf.
            with contextlib.suppress(CorruptCheckpointError):
                self._checkpoint.load()
            yield

    @property
    def prepared(self) -> dict[str, ClaimEntry]:
        """The checkpointed claims (a copy)."""
        return dict(self._checkpoint.claims)

    def start(self) -> None:
        """Load the checkpoint and reconcile it with the CDI directory."""
        hami = self._paths.hami_dir
        for path in (self._paths.plugin_dir, self._paths.cdi_root, hami / "claims"):
            path.mkdir(parents=True, exist_ok=True)
        # HAMi-core (up to 2.8.0) takes its lock there as whatever user the container runs as:
        # without write access for all (and the sticky bit), non-root CUDA processes hang.
        ensure_directory(hami / "lock", 0o1777)
        # Rewritten by rename on every start: never written through a symlink, always complete.
        atomic_write_bytes(hami / "ld.so.preload", (HAMI_LIBRARY_PATH + "\n").encode())
        with self._exclusive():
            self._reconcile()

    def _reconcile(self) -> None:
        """Make the CDI specs and host directories match the checkpoint; see the module."""
        claims, damaged = self._checkpoint.claims, self._checkpoint.damaged
        for uid, entry in claims.items():
            if entry.spec is None:
                continue
            spec_path = self._paths.cdi_root / entry.spec_file
            expected = spec_bytes(entry.spec)
            if _content(spec_path) != expected:
                log.warning("state.respec", claim_uid=uid, reason="CDI spec missing or damaged")
                atomic_write_bytes(spec_path, expected, sync_file=False)
        if damaged:
            # A damaged file may have named any of them: they stay with their containers.
            log.warning(
                "state.orphans_kept",
                damaged=sorted(damaged),
                hint="specs and directories no entry names are kept while a damaged checkpoint "
                "file (<uid>.json.corrupt-<time>) is in the checkpoint directory; delete it "
                "once the pods of the claims it named are gone",
            )
            return
        # Specs and directories of claims with no entry are from prepares cut short by a crash.
        prefix = f"{self._names.cdi_vendor}-{self._names.cdi_class}_"
        known = {entry.spec_file for entry in claims.values()}
        for path in self._paths.cdi_root.glob(f"{prefix}*.json"):
            if path.name not in known:
                log.warning("state.orphan_removed", spec=str(path))
                path.unlink(missing_ok=True)
        for path in self._paths.hami_claims_dir.iterdir():
            if path.name not in claims:
                log.warning("state.orphan_removed", directory=str(path))
                shutil.rmtree(path, ignore_errors=True)

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, Outcome]:
        """Prepare each claim; one claim's failure never affects another's answer.

        The batch moves through the steps together: the CDI specs are written, then one
        checkpoint file records every claim prepared, then the directory is synced. A batch
        costs the files of its own claims, whatever else the node holds. Checkpoint data of a
        format this plugin does not know fails every claim of the batch, and changes nothing.
        """
        try:
            with self._exclusive():
                outcomes: dict[str, Outcome] = {}
                planned: list[_Plan] = []
                fetched = self._fetch(refs)
                for ref in refs:
                    with self._answering(ref, outcomes):
                        plan = self._plan(ref, fetched[ref.uid])
                        if isinstance(plan, _Plan):
                            planned.append(plan)
                        else:
                            outcomes[ref.uid] = Outcome(devices=plan)
                if planned:
                    self._prepare_planned(planned, outcomes)
                return {ref.uid: outcomes[ref.uid] for ref in refs}
        except UnknownCheckpointVersionError as exc:
            log.error("prepare.refused", error=str(exc))  # noqa: TRY400 - the message says it
            return {ref.uid: Outcome(error=str(exc)) for ref in refs}

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare each claim; an unknown claim succeeds. Returns errors ("" for success).

        Specs and host directories go first, then the batch's entries (the files holding them
        rewritten or removed, the directory synced once): a crash in between leaves completed
        entries whose specs reconciliation restores, and the kubelet, never told of success,
        asks again.
        """
        try:
            with self._exclusive():
                errors = {ref.uid: self._unprepare_one(ref) for ref in refs}
                done = [uid for uid, error in errors.items() if not error]
                try:
                    self._checkpoint.remove(*done)
                except OSError as exc:
                    log.exception("unprepare.io_error")
                    errors.update(dict.fromkeys(done, f"removing claim state failed: {exc}"))
                for uid in done:
                    if not errors[uid]:
                        log.info("unprepare.done", claim_uid=uid)
                return errors
        except UnknownCheckpointVersionError as exc:
            log.error("unprepare.refused", error=str(exc))  # noqa: TRY400 - the message says it
            return {ref.uid: str(exc) for ref in refs}

    @contextlib.contextmanager
    def _answering(self, ref: ClaimRef, outcomes: dict[str, Outcome]) -> Iterator[None]:
        """Turn a failure while preparing ``ref`` into its error answer, logged with the claim."""
        with bound(claim_uid=ref.uid, namespace=ref.namespace, name=ref.name):
            try:
                yield
            except (ClaimError, UnsafeNameError) as exc:
                log.warning("prepare.refused", error=str(exc))
                outcomes[ref.uid] = Outcome(error=str(exc))
            except ApiError as exc:
                log.warning("prepare.api_error", error=str(exc))
                outcomes[ref.uid] = Outcome(
                    error=f"reading the claim failed, will be retried: {exc}"
                )
            except OSError as exc:
                log.exception("prepare.io_error")
                outcomes[ref.uid] = Outcome(error=f"writing claim state failed: {exc}")
            except Exception as exc:  # one claim must never fail the kubelet's whole batch
                log.exception("prepare.unexpected_error")
                outcomes[ref.uid] = Outcome(error=f"internal error preparing the claim: {exc!r}")

    def _fetch(self, refs: Sequence[ClaimRef]) -> dict[str, Future[Object]]:
        """Read the claims not prepared before, several at a time: a batch's reads overlap."""
        fetched: dict[str, Future[Object]] = {}
        wanted: list[ClaimRef] = []
        for ref in refs:
            existing = self._checkpoint.claims.get(ref.uid)
            done = existing is not None and existing.state is ClaimState.PREPARE_COMPLETED
            try:
                check_claim_uid(ref.uid)
            except UnsafeNameError:
                done = True  # refused by _plan before it would read
            if done:
                fetched[ref.uid] = Future()
                fetched[ref.uid].cancel()
            else:
                wanted.append(ref)
        # A pool per batch, so no thread outlives the call (starting one costs microseconds).
        workers = min(_READERS, max(len(wanted), 1))
        with ThreadPoolExecutor(workers, initializer=pool_initializer()) as readers:
            for ref in wanted:
                fetched[ref.uid] = readers.submit(self._get_claim, ref.namespace, ref.name)
        return fetched

    def _plan(self, ref: ClaimRef, fetched: Future[Object]) -> _Plan | tuple[PreparedDevice, ...]:
        """Return the work for a new claim, or the devices of one prepared before."""
        check_claim_uid(ref.uid)
        existing = self._checkpoint.claims.get(ref.uid)
        if existing is not None and existing.state is ClaimState.PREPARE_COMPLETED:
            spec_path = self._paths.cdi_root / existing.spec_file
            if existing.spec is not None and not spec_path.exists():
                # The answer would name devices no spec defines: restore the spec first.
                log.warning("state.respec", reason="CDI spec missing on re-prepare")
                atomic_write_bytes(spec_path, spec_bytes(existing.spec), sync_file=False)
            log.info("prepare.already_prepared")
            return existing.devices
        try:
            claim = fetched.result()
        except NotFoundError as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name} not found") from exc
        actual = claim["metadata"].get("uid")
        if actual != ref.uid:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name} was replaced: its UID is {actual}, "
                f"the kubelet asked for {ref.uid}"
            )
        host = self._paths.host_paths(ref.uid)
        prepared = prepare_claim(
            self._names,
            self._node,
            claim,
            cards=self._cards(),
            default_backend=self._default_backend,
            host=host,
        )
        spec_file = spec_file_name(self._names, ref.uid)
        entry = ClaimEntry(ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_STARTED, spec_file)
        spec = canonical_json(prepared.spec.to_dict())
        return _Plan(
            ref, entry, spec, prepared.devices, host, prepared.config, prepared.share,
            prepared.statuses,
        )  # fmt: skip

    def _prepare_planned(self, planned: list[_Plan], outcomes: dict[str, Outcome]) -> None:
        written: list[_Plan] = []
        for plan in planned:
            with self._answering(plan.ref, outcomes):
                if plan.config.backend is Backend.HAMI_CORE:
                    # Container processes run as any user and must share the region file.
                    ensure_directory(plan.host.hami_cache_dir, 0o777)
                path = self._paths.cdi_root / plan.entry.spec_file
                # Not fsynced: the entry holds the spec, and start-up rewrites one cut short.
                atomic_write_bytes(path, spec_bytes(plan.spec), sync_file=False)
                written.append(plan)
        pause_point("after-spec")
        completed = [
            dataclasses.replace(
                plan.entry,
                state=ClaimState.PREPARE_COMPLETED,
                devices=plan.devices,
                spec=plan.spec,
                share=plan.share,
            )
            for plan in written
        ]
        try:
            self._checkpoint.put(*completed)
        except OSError as exc:
            log.exception("prepare.io_error")
            for entry in completed:
                outcomes[entry.uid] = Outcome(error=f"writing claim state failed: {exc}")
        pause_point("after-entry")
        for plan in planned:
            uid = plan.ref.uid
            if uid in outcomes and uid not in self._checkpoint.claims:
                # Nothing records this claim: its files go now rather than at the next start.
                self._remove_files(uid)
            elif uid not in outcomes:
                with bound(claim_uid=uid, namespace=plan.ref.namespace, name=plan.ref.name):
                    log.info(
                        "prepare.done", devices=len(plan.devices), backend=str(plan.config.backend)
                    )
                outcomes[uid] = Outcome(devices=plan.devices)
                if self._on_prepared is not None:
                    self._on_prepared(plan.ref, plan.statuses)

    def _unprepare_one(self, ref: ClaimRef) -> str:
        with bound(claim_uid=ref.uid, namespace=ref.namespace, name=ref.name):
            try:
                check_claim_uid(ref.uid)
            except UnsafeNameError as exc:
                return str(exc)
            try:
                self._remove_files(ref.uid)
            except OSError as exc:
                log.exception("unprepare.io_error")
                return f"removing claim state failed: {exc}"
            return ""

    def _remove_files(self, uid: str) -> None:
        """Remove the claim's CDI spec and its per-claim host directory, if they exist."""
        (self._paths.cdi_root / spec_file_name(self._names, uid)).unlink(missing_ok=True)
        shutil.rmtree(self._paths.host_paths(uid).hami_cache_dir, ignore_errors=True)
