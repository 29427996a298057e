"""The card source of a real node: NVML through nvidia-ml-py (``import pynvml``).

:class:`NvmlCardSource` loads NVML, from a mounted host driver root when it is not ``/``, and
reads each card on every discovery. A background thread waits on an NVML event set for critical
XID and double-bit ECC events and marks the card Unhealthy (until the source is restarted),
ignoring the XIDs that an application causes, as NVIDIA's device plugin does.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from pathlib import Path
from typing import Any, Final

import pynvml

from dra_driver.logging import carry, get_logger
from dra_driver.nvml import processes
from dra_driver.nvml.card import Card, Health, InventoryError
from dra_driver.nvml.source import CardError, Discovery, DiscoveryError

__all__ = ["APPLICATION_XIDS", "LIBRARY", "LIBRARY_DIRS", "NvmlCardSource", "preload_library"]

log = get_logger(__name__)

LIBRARY: Final = "libnvidia-ml.so.1"
# Where distributions put the driver's libraries, relative to a driver root; tried in order.
LIBRARY_DIRS: Final = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib64",
    "lib",
    "usr/lib/aarch64-linux-gnu",
)
# XIDs an application causes (bad memory access, exceptions, preemption faults): not card faults.
APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
_XID_DESCRIPTIONS: Final = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapping recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
_ARCHITECTURE_NAMES: Final = "Kepler Maxwell Pascal Volta Turing Ampere Ada Hopper Blackwell Rubin"
# nvmlDeviceGetArchitecture's values, from pynvml's NVML_DEVICE_ARCH_<NAME> constants.
_ARCHITECTURES: Final[dict[int, str]] = {
    int(getattr(pynvml, f"NVML_DEVICE_ARCH_{name.upper()}")): name
    for name in _ARCHITECTURE_NAMES.split()
    if hasattr(pynvml, f"NVML_DEVICE_ARCH_{name.upper()}")
}
_XID_EVENT: Final = int(pynvml.nvmlEventTypeXidCriticalError)
_ECC_EVENT: Final = int(pynvml.nvmlEventTypeDoubleBitEccError)
_INIT_HINTS: Final = (
    ("NVMLError_DriverNotLoaded", "check that the NVIDIA kernel module is loaded (nvidia-smi)"),
    (
        "NVMLError_NoPermission",
        "check that the plugin may open /dev/nvidiactl and /dev/nvidia* (privileged, or the "
        "device nodes mounted)",
    ),
    (
        "NVMLError_LibRmVersionMismatch",
        "the library does not match the loaded kernel module; check that the driver root holds "
        "the running driver's libraries",
    ),
)


class _CallError(Exception):
    """An NVML call failed; the text names the call and NVML's reason."""

    def __init__(self, function: str, error: Exception) -> None:
        super().__init__(f"{function} failed: {error}")
        self.error = error


def _call(function: str, *args: object) -> Any:  # noqa: ANN401 - pynvml is untyped
    """Call ``pynvml.<function>``, looked up now so tests can replace it; wrap NVML errors."""
    try:
        return getattr(pynvml, function)(*args)
    except pynvml.NVMLError as error:
        raise _CallError(function, error) from error


def _unsupported(error: _CallError) -> bool:
    kinds = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)
    return isinstance(error.error, kinds)


def _optional(function: str, *args: object) -> Any:  # noqa: ANN401 - pynvml is untyped
    """Like :func:`_call`, but None when the binding, driver or card lacks the call."""
    if not hasattr(pynvml, function):
        return None
    try:
        return _call(function, *args)
    except _CallError as error:
        if _unsupported(error):
            return None
        raise


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _free(event_set: object) -> None:
    try:
        _call("nvmlEventSetFree", event_set)
    except _CallError as error:
        log.warning("nvml.event_set_free_failed", error=str(error))


def _xid_message(xid: int) -> str:
    description = _XID_DESCRIPTIONS.get(xid)
    return f"XID {xid} ({description})" if description else f"XID {xid}"


def preload_library(driver_root: Path) -> ctypes.CDLL:
    """Load NVML from the first of :data:`LIBRARY_DIRS` under ``driver_root`` that has it.

    pynvml later opens the library by soname only, which resolves to this loaded copy.
    """
    if not driver_root.is_dir():
        raise DiscoveryError(
            f"driver root {driver_root} is not a directory: mount the host's driver root there, "
            "or use driver root / when the driver is installed in this container's filesystem"
        )
    tried = []
    for directory in LIBRARY_DIRS:
        path = driver_root / directory / LIBRARY
        try:
            return ctypes.CDLL(str(path))
        except OSError as error:
            tried.append(f"{path} ({str(error).removeprefix(f'{path}: ')})")
    raise DiscoveryError(
        f"cannot load {LIBRARY} from driver root {driver_root}: tried {'; '.join(tried)}; "
        f"check that the host's driver root is mounted at {driver_root} and holds the NVIDIA "
        "driver's user-space libraries"
    )


def _init_failure(driver_root: Path, error: Exception) -> str:
    if isinstance(error, pynvml.NVMLError_LibraryNotFound):
        if driver_root == Path("/"):
            hint = (
                f"check that the NVIDIA driver is installed and {LIBRARY} is on the loader "
                "path, or set the driver root to where the host's driver is mounted"
            )
        else:
            hint = f"check that the host's driver root is mounted at {driver_root}"
    else:
        hint = next(
            (text for name, text in _INIT_HINTS if isinstance(error, getattr(pynvml, name))),
            "check the NVIDIA driver on the node (nvidia-smi) and the driver root",
        )
    return f"cannot initialise NVML (driver root {driver_root}): {error}; {hint}"


def _memory_total(handle: object) -> int:
    try:
        info = _call("nvmlDeviceGetMemoryInfo", handle, pynvml.nvmlMemory_v2)
    except _CallError as error:
        if not _unsupported(error):
            raise
        info = _call("nvmlDeviceGetMemoryInfo", handle)  # drivers without nvmlMemory_v2
    return int(info.total)


def _read_card(index: int, driver_version: str) -> Card | CardError:
    """Read card ``index``; any NVML error or unusable value becomes a CardError."""
    uuid: str | None = None
    try:
        handle = _call("nvmlDeviceGetHandleByIndex", index)
        uuid = _text(_call("nvmlDeviceGetUUID", handle))
        major, minor = _call("nvmlDeviceGetCudaComputeCapability", handle)
        numa_node = _optional("nvmlDeviceGetNumaNodeId", handle)
        architecture = _optional("nvmlDeviceGetArchitecture", handle)
        return Card(
            uuid=uuid,
            product_name=_text(_call("nvmlDeviceGetName", handle)),
            memory_bytes=_memory_total(handle),
            pci_bus_id=_text(_call("nvmlDeviceGetPciInfo", handle).busId),
            minor=int(_call("nvmlDeviceGetMinorNumber", handle)),
            index=index,
            architecture=(
                "Unknown"
                if architecture is None
                else _ARCHITECTURES.get(int(architecture), "Unknown")
            ),
            cuda_compute_capability=f"{int(major)}.{int(minor)}",
            driver_version=driver_version,
            numa_node=None if numa_node is None or int(numa_node) < 0 else int(numa_node),
        )
    except _CallError as error:
        return CardError(index, uuid, str(error))
    except InventoryError as error:
        return CardError(index, uuid, f"NVML reported a value the driver cannot use: {error}")


class NvmlCardSource:
    """The cards NVML reports on this node, with health from NVML's XID and ECC events.

    ``driver_root`` is where the host's driver is mounted (``/`` when it is installed in this
    filesystem). ``event_timeout`` (seconds) bounds each wait for an event, and so how long
    :meth:`stop` may take.
    """

    def __init__(self, driver_root: Path = Path("/"), *, event_timeout: float = 0.5) -> None:
        self.driver_root = Path(driver_root)
        self.event_timeout = event_timeout
        self._library: ctypes.CDLL | None = None  # kept so the preloaded copy stays loaded
        self._driver_version = ""
        self._started = False
        self._lock = threading.Lock()
        self._unhealthy: dict[str, str] = {}  # card UUID -> health message
        self._watched: list[str] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: object | None = None

    def start(self) -> None:
        """Load and initialise NVML, read the driver version and start watching health."""
        if self._started:
            return
        if self.driver_root != Path("/"):
            self._library = preload_library(self.driver_root)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise DiscoveryError(_init_failure(self.driver_root, error)) from error
        try:
            self._driver_version = _text(_call("nvmlSystemGetDriverVersion"))
        except _CallError as error:
            self._shutdown()
            raise DiscoveryError(
                f"NVML started but {error} (driver root {self.driver_root}); "
                "check the NVIDIA driver on the node (nvidia-smi)"
            ) from error
        self._started = True
        self._stopping.clear()
        self._event_set = self._register_events()
        if self._event_set is not None:
            self._thread = threading.Thread(
                target=carry(self._watch), args=(self._event_set,), name="nvml-health", daemon=True
            )
            self._thread.start()
        log.info("nvml.started", driver_version=self._driver_version, cards=len(self._watched))

    def stop(self) -> None:
        """Stop watching health and shut NVML down; returns within about ``event_timeout``."""
        if not self._started:
            return
        self._started = False
        self._stopping.set()
        stuck = False
        if self._thread is not None:
            self._thread.join(timeout=self.event_timeout + 1.0)
            stuck = self._thread.is_alive()
            self._thread = None
        if stuck:  # freeing the set under a wait that never returned is undefined behaviour
            log.warning("nvml.health_watch_stuck", timeout_s=self.event_timeout + 1.0)
        else:
            if self._event_set is not None:
                _free(self._event_set)
            self._shutdown()
        self._event_set = None
        with self._lock:
            self._unhealthy.clear()
            self._watched = []

    def version(self) -> str:
        """Return the driver version NVML reported at start."""
        if not self._started:
            raise DiscoveryError("the NVML card source is not started; call start() first")
        return self._driver_version

    def running_pids(self) -> frozenset[int] | None:
        """Return the host PIDs with work on the cards (:mod:`dra_driver.nvml.processes`)."""
        return processes.running_pids() if self._started else None

    def discover(self) -> Discovery:
        """Read every card now; a card that fails to read becomes a CardError."""
        if not self._started:
            raise DiscoveryError("the NVML card source is not started; call start() first")
        try:
            count = int(_call("nvmlDeviceGetCount"))
        except _CallError as error:
            raise DiscoveryError(
                f"cannot count the cards: {error} (driver root {self.driver_root}); "
                "check the NVIDIA driver on the node (nvidia-smi)"
            ) from error
        with self._lock:
            unhealthy = dict(self._unhealthy)
        cards, errors = [], []
        for index in range(count):
            result = _read_card(index, self._driver_version)
            if isinstance(result, CardError):
                errors.append(result)
            elif result.uuid in unhealthy:
                message = unhealthy[result.uuid]
                cards.append(
                    dataclasses.replace(result, health=Health.UNHEALTHY, health_message=message)
                )
            else:
                cards.append(result)
        return Discovery(tuple(cards), tuple(errors))

    def _shutdown(self) -> None:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as error:
            log.warning("nvml.shutdown_failed", error=str(error))

    def _register_events(self) -> object | None:
        """Create an event set watching every card that supports health events, or None."""
        try:
            event_set: object = _call("nvmlEventSetCreate")
            count = int(_call("nvmlDeviceGetCount"))
        except _CallError as error:
            log.warning("nvml.health_events_unavailable", error=str(error))
            return None
        for index in range(count):
            self._register_card(index, event_set)
        if self._watched:
            return event_set
        _free(event_set)
        return None

    def _register_card(self, index: int, event_set: object) -> None:
        """Watch card ``index``; without events (NotSupported) skip it, on failure mark it."""
        uuid: str | None = None
        try:
            handle = _call("nvmlDeviceGetHandleByIndex", index)
            uuid = _text(_call("nvmlDeviceGetUUID", handle))
            events = int(_call("nvmlDeviceGetSupportedEventTypes", handle))
            events &= _XID_EVENT | _ECC_EVENT
            if events:
                _call("nvmlDeviceRegisterEvents", handle, events, event_set)
                self._watched.append(uuid)
                return
        except _CallError as error:
            if not _unsupported(error):  # as NVIDIA's plugin does: an unwatchable card is suspect
                log.warning("nvml.health_events_failed", index=index, uuid=uuid, error=str(error))
                self._mark([] if uuid is None else [uuid], f"health events unavailable: {error}")
                return
        log.info("nvml.health_events_unsupported", index=index, uuid=uuid)

    def _watch(self, event_set: object) -> None:
        timeout_ms = max(1, int(self.event_timeout * 1000))
        while not self._stopping.is_set():
            try:
                data = pynvml.nvmlEventSetWait(event_set, timeout_ms)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as error:  # as NVIDIA's plugin does: no card can be trusted
                self._mark(self._watched, f"NVML event wait failed: {error}")
                self._stopping.wait(self.event_timeout)
                continue
            self._on_event(data)

    def _on_event(self, data: Any) -> None:  # noqa: ANN401 - a pynvml c_nvmlEventData_t
        event_type = int(data.eventType)
        if event_type & _XID_EVENT:
            xid = int(data.eventData)
            if xid in APPLICATION_XIDS:
                log.info("nvml.application_xid_ignored", xid=xid)
                return
            message = _xid_message(xid)
        elif event_type & _ECC_EVENT:
            message = "double-bit ECC error"
        else:
            return
        try:
            self._mark([_text(_call("nvmlDeviceGetUUID", data.device))], message)
        except _CallError as error:  # as NVIDIA's plugin does: no card can be trusted
            self._mark(self._watched, f"{message} on a card NVML could not identify ({error})")

    def _mark(self, uuids: list[str], message: str) -> None:
        """Mark watched cards Unhealthy; the first message of a card is kept (the root cause)."""
        with self._lock:
            marked = [uuid for uuid in uuids if uuid not in self._unhealthy]
            self._unhealthy.update(dict.fromkeys(marked, message))
        for uuid in marked:
            log.warning("nvml.card_unhealthy", uuid=uuid, reason=message)
