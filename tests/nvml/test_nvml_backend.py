"""The NVML card source against a fake NVML: field mapping, errors, preload, health events."""

# ruff: noqa: N802 - FakeNvml's methods bear the names of the pynvml functions they replace

from __future__ import annotations

import ctypes
import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from structlog.testing import capture_logs

from dra_driver.nvml import real
from dra_driver.nvml.inventory import Card, Health
from dra_driver.nvml.real import LIBRARY_DIRS, NvmlCardSource
from dra_driver.nvml.source import CardError, CardSource, DiscoveryError

GI = 2**30
H100 = "GPU-0efc110c-12c1-5f96-b4ff-304e5c339d3c"
A100 = "GPU-26975e32-62e5-543b-ac29-e97c231c6291"
T4 = "GPU-5f6e2bd7-0b6c-4d21-9d2e-3a8f3c1e7a01"
HEALTH_EVENTS = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
ALL_EVENTS = HEALTH_EVENTS | pynvml.nvmlEventTypeSingleBitEccError
DEADLINE_S = 5.0


@dataclass
class FakeGpu:
    """One card as the fake NVML describes it; ``fail`` maps an NVML call to what it raises."""

    uuid: str
    name: str
    memory: int
    bus_id: str | bytes
    minor: int
    architecture: int
    capability: tuple[int, int]
    numa: int | Exception
    events: int | Exception = ALL_EVENTS
    fail: dict[str, Exception] = field(default_factory=dict)


def three_gpus() -> list[FakeGpu]:
    """NVML order H100, A100, T4; bus order A100 (1a), H100 (3b), T4 (af)."""
    return [
        FakeGpu(H100, "NVIDIA H100 80GB HBM3", 80 * GI, "00000000:3B:00.0", 2, 9, (9, 0), 1),
        FakeGpu(
            A100,
            "NVIDIA A100-SXM4-40GB",
            40 * GI,
            b"00000000:1A:00.0",
            0,
            pynvml.NVML_DEVICE_ARCH_AMPERE,
            (8, 0),
            pynvml.NVMLError_NotSupported(),
        ),
        FakeGpu(T4, "Tesla T4", 15 * GI, "00000000:AF:00.0", 1, 0xFFFFFFFF, (7, 5), -1),
    ]


class FakeNvml:
    """Replaces pynvml's functions with an in-memory NVML holding ``gpus``."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.init_error: Exception | None = None
        self.count_error: Exception | None = None
        self.memory_v2 = True
        self.memory_versions: list[object] = []
        self.events: queue.Queue[SimpleNamespace | Exception] = queue.Queue()
        self.registered: list[tuple[str, int]] = []
        self.log: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    def _gpu(self, call: str, handle: object) -> FakeGpu:
        if not isinstance(handle, FakeGpu):
            raise pynvml.NVMLError_GpuIsLost()
        if call in handle.fail:
            raise handle.fail[call]
        return handle

    def nvmlInit(self) -> None:
        self.log.append("init")
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.log.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise self.count_error
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self._gpu("nvmlDeviceGetHandleByIndex", self.gpus[index])

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: object = None) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        self.memory_versions.append(version)
        if version is not None and not self.memory_v2:
            raise pynvml.NVMLError_FunctionNotFound()
        return SimpleNamespace(total=gpu.memory, free=gpu.memory, used=0)

    def nvmlDeviceGetPciInfo(self, handle: object) -> SimpleNamespace:
        return SimpleNamespace(busId=self._gpu("nvmlDeviceGetPciInfo", handle).bus_id)

    def nvmlDeviceGetMinorNumber(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetMinorNumber", handle).minor

    def nvmlDeviceGetNumaNodeId(self, handle: object) -> int:
        numa = self._gpu("nvmlDeviceGetNumaNodeId", handle).numa
        if isinstance(numa, Exception):
            raise numa
        return numa

    def nvmlDeviceGetArchitecture(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetArchitecture", handle).architecture

    def nvmlDeviceGetCudaComputeCapability(self, handle: object) -> tuple[int, int]:
        return self._gpu("nvmlDeviceGetCudaComputeCapability", handle).capability

    def nvmlEventSetCreate(self) -> str:
        self.log.append("event set created")
        return "event-set"

    def nvmlDeviceGetSupportedEventTypes(self, handle: object) -> int:
        events = self._gpu("nvmlDeviceGetSupportedEventTypes", handle).events
        if isinstance(events, Exception):
            raise events
        return events

    def nvmlDeviceRegisterEvents(self, handle: object, events: int, event_set: object) -> None:
        assert event_set == "event-set"
        self.registered.append((self._gpu("nvmlDeviceRegisterEvents", handle).uuid, events))

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        try:
            event = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError_Timeout() from None
        if isinstance(event, Exception):
            raise event
        return event

    def nvmlEventSetFree(self, event_set: object) -> None:
        self.log.append("event set freed")

    def send(self, device: object, event_type: int, data: int = 0) -> None:
        self.events.put(SimpleNamespace(device=device, eventType=event_type, eventData=data))


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    return FakeNvml(three_gpus()).install(monkeypatch)


@pytest.fixture
def source(nvml: FakeNvml) -> Iterator[NvmlCardSource]:
    source = NvmlCardSource(event_timeout=0.02)
    source.start()
    yield source
    source.stop()


def wait_for_health(source: NvmlCardSource, uuid: str) -> Card:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        card = next(c for c in source.discover().cards if c.uuid == uuid)
        if card.health is Health.UNHEALTHY:
            return card
        time.sleep(0.01)
    pytest.fail(f"card {uuid} never became Unhealthy")


def test_fields_are_mapped_from_nvml(source: NvmlCardSource) -> None:
    """UUID, name, memory, minor, bus ID (normalised), NUMA, architecture name and CC map over."""
    common = {"driver_version": "550.54.15", "health": Health.HEALTHY}
    assert source.discover().cards == (
        Card(
            uuid=A100,
            product_name="NVIDIA A100-SXM4-40GB",
            memory_bytes=40 * GI,
            pci_bus_id="0000:1a:00.0",
            minor=0,
            index=1,
            architecture="Ampere",
            cuda_compute_capability="8.0",
            numa_node=None,  # nvmlDeviceGetNumaNodeId not supported
            **common,
        ),
        Card(
            uuid=H100,
            product_name="NVIDIA H100 80GB HBM3",
            memory_bytes=80 * GI,
            pci_bus_id="0000:3b:00.0",
            minor=2,
            index=0,
            architecture="Hopper",
            cuda_compute_capability="9.0",
            numa_node=1,
            **common,
        ),
        Card(
            uuid=T4,
            product_name="Tesla T4",
            memory_bytes=15 * GI,
            pci_bus_id="0000:af:00.0",
            minor=1,
            index=2,
            architecture="Unknown",  # NVML_DEVICE_ARCH_UNKNOWN
            cuda_compute_capability="7.5",
            numa_node=None,  # NVML's -1: no NUMA affinity
            **common,
        ),
    )
    assert source.discover().errors == ()
    assert source.version() == "550.54.15"


def test_every_known_architecture_constant_has_its_name() -> None:
    """pynvml's NVML_DEVICE_ARCH_* constants map to Kepler ... Blackwell."""
    names = ("Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper")
    for name in (*names, "Blackwell"):
        constant = getattr(pynvml, f"NVML_DEVICE_ARCH_{name.upper()}")
        assert real._ARCHITECTURES[constant] == name


def test_memory_falls_back_to_v1_on_old_drivers(nvml: FakeNvml, source: NvmlCardSource) -> None:
    """Without nvmlDeviceGetMemoryInfo_v2 the total comes from the v1 call."""
    nvml.memory_v2 = False
    nvml.memory_versions.clear()
    assert [c.memory_bytes for c in source.discover().cards] == [40 * GI, 80 * GI, 15 * GI]
    assert nvml.memory_versions == [pynvml.nvmlMemory_v2, None] * 3


def test_a_lost_card_is_one_card_error_and_the_others_still_come(
    nvml: FakeNvml, source: NvmlCardSource
) -> None:
    """GpuIsLost on one card's memory read yields a CardError for it and the two other cards."""
    nvml.gpus[1].fail["nvmlDeviceGetMemoryInfo"] = pynvml.NVMLError_GpuIsLost()
    discovery = source.discover()
    assert [card.uuid for card in discovery.cards] == [H100, T4]
    assert discovery.errors == (CardError(1, A100, "nvmlDeviceGetMemoryInfo failed: GPU is lost"),)


def test_a_card_without_a_handle_is_a_card_error_without_uuid(
    nvml: FakeNvml, source: NvmlCardSource
) -> None:
    """A card NVML cannot even open is reported by index alone."""
    nvml.gpus[0].fail["nvmlDeviceGetHandleByIndex"] = pynvml.NVMLError_GpuIsLost()
    discovery = source.discover()
    assert [card.uuid for card in discovery.cards] == [A100, T4]
    assert discovery.errors == (
        CardError(0, None, "nvmlDeviceGetHandleByIndex failed: GPU is lost"),
    )


def test_a_value_the_card_model_refuses_is_a_card_error(
    nvml: FakeNvml, source: NvmlCardSource
) -> None:
    """An NVML value that breaks the Card rules (a too-long name) is a CardError, not a crash."""
    nvml.gpus[2].name = "x" * 65
    (error,) = source.discover().errors
    assert (error.index, error.uuid) == (2, T4)
    assert error.message == (
        "NVML reported a value the driver cannot use: Card: productName: expected a non-empty "
        "printable string of at most 64 characters, got the string "
        f'"{"x" * 64}"...'
    )


def test_a_failing_card_count_is_a_discovery_error(nvml: FakeNvml, source: NvmlCardSource) -> None:
    """When NVML cannot even count the cards, the whole discovery fails with a hint."""
    nvml.count_error = pynvml.NVMLError_Unknown()
    with pytest.raises(DiscoveryError) as caught:
        source.discover()
    assert str(caught.value) == (
        "cannot count the cards: nvmlDeviceGetCount failed: Unknown Error (driver root /); "
        "check the NVIDIA driver on the node (nvidia-smi)"
    )


def test_discover_and_version_need_start(nvml: FakeNvml) -> None:
    """A source that was never started refuses to discover instead of calling NVML."""
    source: CardSource = NvmlCardSource()
    for call in (source.discover, source.version):
        with pytest.raises(DiscoveryError, match=r"^the NVML card source is not started; call"):
            call()
    assert nvml.log == []


def test_missing_library_names_the_driver_root(nvml: FakeNvml) -> None:
    """nvmlInit's LibraryNotFound becomes a DiscoveryError naming driver root / and what to do."""
    nvml.init_error = pynvml.NVMLError_LibraryNotFound()
    with pytest.raises(DiscoveryError) as caught:
        NvmlCardSource().start()
    assert str(caught.value) == (
        "cannot initialise NVML (driver root /): NVML Shared Library Not Found; check that the "
        "NVIDIA driver is installed and libnvidia-ml.so.1 is on the loader path, or set the "
        "driver root to where the host's driver is mounted"
    )


def test_missing_library_under_a_mounted_driver_root_names_it(
    nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With a driver root, the LibraryNotFound message names that root."""
    monkeypatch.setattr(ctypes, "CDLL", lambda path: path)
    nvml.init_error = pynvml.NVMLError_LibraryNotFound()
    with pytest.raises(DiscoveryError) as caught:
        NvmlCardSource(tmp_path).start()
    assert str(caught.value) == (
        f"cannot initialise NVML (driver root {tmp_path}): NVML Shared Library Not Found; "
        f"check that the host's driver root is mounted at {tmp_path}"
    )


@pytest.mark.parametrize(
    ("error", "hint"),
    [
        (pynvml.NVMLError_DriverNotLoaded(), "check that the NVIDIA kernel module is loaded"),
        (pynvml.NVMLError_NoPermission(), "check that the plugin may open /dev/nvidiactl"),
        (pynvml.NVMLError_Unknown(), "check the NVIDIA driver on the node (nvidia-smi)"),
    ],
)
def test_other_init_failures_say_what_to_check(nvml: FakeNvml, error: Exception, hint: str) -> None:
    """Each nvmlInit failure gives NVML's reason and a hint fitting it."""
    nvml.init_error = error
    with pytest.raises(DiscoveryError) as caught:
        NvmlCardSource().start()
    assert str(caught.value).startswith(f"cannot initialise NVML (driver root /): {error}; {hint}")


def test_driver_root_preload_tries_the_library_dirs_in_order(
    nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """start() loads libnvidia-ml.so.1 from the first library dir under the root that has it."""
    tried: list[str] = []

    def cdll(path: str) -> str:
        tried.append(path)
        if not path.startswith(f"{tmp_path}/usr/lib64/"):
            raise OSError(f"{path}: cannot open shared object file: No such file or directory")
        return path

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    source = NvmlCardSource(tmp_path, event_timeout=0.02)
    source.start()
    source.stop()
    assert tried == [
        f"{tmp_path}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        f"{tmp_path}/usr/lib64/libnvidia-ml.so.1",
    ]
    assert nvml.log[0] == "init"  # NVML initialised after the preload


def test_driver_root_without_the_library_lists_every_path_tried(
    nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """When no candidate loads, the error lists each path with its reason and never inits."""

    def cdll(path: str) -> None:
        raise OSError(f"{path}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    with pytest.raises(DiscoveryError) as caught:
        NvmlCardSource(tmp_path).start()
    tried = "; ".join(
        f"{tmp_path}/{d}/libnvidia-ml.so.1 (cannot open shared object file: No such file or "
        "directory)"
        for d in LIBRARY_DIRS
    )
    assert str(caught.value) == (
        f"cannot load libnvidia-ml.so.1 from driver root {tmp_path}: tried {tried}; check that "
        f"the host's driver root is mounted at {tmp_path} and holds the NVIDIA driver's "
        "user-space libraries"
    )
    assert nvml.log == []


def test_a_driver_root_that_is_not_a_directory_is_refused(nvml: FakeNvml, tmp_path: Path) -> None:
    """A driver root that was never mounted is named as such."""
    root = tmp_path / "driver-root"
    with pytest.raises(DiscoveryError) as caught:
        NvmlCardSource(root).start()
    assert str(caught.value) == (
        f"driver root {root} is not a directory: mount the host's driver root there, or use "
        "driver root / when the driver is installed in this container's filesystem"
    )


def test_a_critical_xid_marks_its_card_unhealthy(nvml: FakeNvml, source: NvmlCardSource) -> None:
    """XID 79 on the T4 marks that card Unhealthy with a readable message; others stay Healthy."""
    nvml.send(nvml.gpus[2], pynvml.nvmlEventTypeXidCriticalError, 79)
    card = wait_for_health(source, T4)
    assert card.health_message == "XID 79 (GPU has fallen off the bus)"
    others = [c.health for c in source.discover().cards if c.uuid != T4]
    assert others == [Health.HEALTHY, Health.HEALTHY]


def test_application_xids_are_ignored(nvml: FakeNvml, source: NvmlCardSource) -> None:
    """XID 13 (an application's fault) leaves the card Healthy; a later XID still counts."""
    with capture_logs() as logs:
        nvml.send(nvml.gpus[0], pynvml.nvmlEventTypeXidCriticalError, 13)
        nvml.send(nvml.gpus[1], pynvml.nvmlEventTypeXidCriticalError, 150)
        assert wait_for_health(source, A100).health_message == "XID 150"
    assert next(c for c in source.discover().cards if c.uuid == H100).health is Health.HEALTHY
    assert {"event": "nvml.application_xid_ignored", "xid": 13, "log_level": "info"} in logs


def test_a_double_bit_ecc_error_marks_its_card_unhealthy(
    nvml: FakeNvml, source: NvmlCardSource
) -> None:
    """A double-bit ECC event makes its card Unhealthy."""
    nvml.send(nvml.gpus[0], pynvml.nvmlEventTypeDoubleBitEccError)
    assert wait_for_health(source, H100).health_message == "double-bit ECC error"


def test_an_event_from_an_unidentifiable_card_marks_every_card(
    nvml: FakeNvml, source: NvmlCardSource
) -> None:
    """When NVML cannot name the event's card, every watched card is Unhealthy, as NVIDIA does."""
    nvml.send(object(), pynvml.nvmlEventTypeXidCriticalError, 79)
    wait_for_health(source, T4)
    messages = {c.health_message for c in source.discover().cards}
    assert messages == {
        "XID 79 (GPU has fallen off the bus) on a card NVML could not identify "
        "(nvmlDeviceGetUUID failed: GPU is lost)"
    }


def test_a_failing_event_wait_marks_every_watched_card(
    nvml: FakeNvml, source: NvmlCardSource
) -> None:
    """An event wait failing with anything but Timeout leaves no card trusted, as NVIDIA does."""
    nvml.events.put(pynvml.NVMLError_GpuIsLost())
    wait_for_health(source, H100)
    messages = {c.health_message for c in source.discover().cards}
    assert messages == {"NVML event wait failed: GPU is lost"}


def test_a_card_whose_events_cannot_be_registered_is_unhealthy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A registration error other than NotSupported marks that card Unhealthy from the start."""
    gpus = three_gpus()
    gpus[1].events = pynvml.NVMLError_Unknown()
    nvml = FakeNvml(gpus).install(monkeypatch)
    source = NvmlCardSource(event_timeout=0.02)
    source.start()
    health = {c.uuid: (c.health, c.health_message) for c in source.discover().cards}
    source.stop()
    assert nvml.registered == [(H100, HEALTH_EVENTS), (T4, HEALTH_EVENTS)]
    assert health == {
        H100: (Health.HEALTHY, None),
        A100: (
            Health.UNHEALTHY,
            "health events unavailable: nvmlDeviceGetSupportedEventTypes failed: Unknown Error",
        ),
        T4: (Health.HEALTHY, None),
    }


def test_health_is_forgotten_on_restart(nvml: FakeNvml) -> None:
    """After stop() and start() a card is Healthy again until a new event says otherwise."""
    source = NvmlCardSource(event_timeout=0.02)
    source.start()
    nvml.send(nvml.gpus[0], pynvml.nvmlEventTypeXidCriticalError, 79)
    wait_for_health(source, H100)
    source.stop()
    source.start()
    assert {c.health for c in source.discover().cards} == {Health.HEALTHY}
    source.stop()


def test_events_are_registered_only_where_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    """NotSupported or no health events: that card is skipped and logged once; others watched."""
    gpus = three_gpus()
    gpus[0].events = pynvml.NVMLError_NotSupported()
    gpus[2].events = pynvml.nvmlEventTypeSingleBitEccError
    nvml = FakeNvml(gpus).install(monkeypatch)
    with capture_logs() as logs:
        source = NvmlCardSource(event_timeout=0.02)
        source.start()
        source.discover()
        source.stop()
    assert nvml.registered == [(A100, HEALTH_EVENTS)]
    skipped = [
        (entry["index"], entry["uuid"])
        for entry in logs
        if entry["event"] == "nvml.health_events_unsupported"
    ]
    assert skipped == [(0, H100), (2, T4)]


def test_no_watchable_card_means_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without any card supporting health events the event set is freed and nothing waits."""
    gpus = three_gpus()
    for gpu in gpus:
        gpu.events = 0
    nvml = FakeNvml(gpus).install(monkeypatch)
    source = NvmlCardSource()
    source.start()
    assert source._thread is None
    assert len(source.discover().cards) == 3
    source.stop()
    assert nvml.log == ["init", "event set created", "event set freed", "shutdown"]


def test_stop_returns_promptly_and_releases_nvml(nvml: FakeNvml) -> None:
    """stop() ends the event thread within the default wait, frees the set and shuts NVML down."""
    source = NvmlCardSource()  # the production wait of 0.5 s
    source.start()
    thread = source._thread
    assert thread is not None
    assert thread.is_alive()
    started = time.monotonic()
    source.stop()
    assert time.monotonic() - started < 1.5
    assert not thread.is_alive()
    assert nvml.log == ["init", "event set created", "event set freed", "shutdown"]
    source.stop()  # a second stop is harmless
    assert nvml.log[-1] == "shutdown"
    assert nvml.log.count("shutdown") == 1


@pytest.mark.gpu
def test_real_nvml_discovers_this_nodes_cards() -> None:
    """On a node with an NVIDIA GPU, the real source finds at least one readable card."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        pytest.skip(f"no usable NVML on this machine: {error}")
    pynvml.nvmlShutdown()
    source = NvmlCardSource()
    source.start()
    try:
        discovery = source.discover()
    finally:
        source.stop()
    for card in discovery.cards:
        print(card)  # noqa: T201 - shown with pytest -s on a GPU node
    assert discovery.errors == ()
    assert discovery.cards
