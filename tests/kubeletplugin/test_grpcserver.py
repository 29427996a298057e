"""The kubelet-facing gRPC server in-process, over real unix sockets, with fakes behind it."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from dra_driver._proto.dra.v1 import api_pb2 as dra_v1
from dra_driver._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra_driver._proto.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_driver._proto.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from dra_driver._proto.dra_health.v1 import api_pb2 as health_v1
from dra_driver._proto.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from dra_driver._proto.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from dra_driver._proto.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from dra_driver._proto.pluginregistration.v1 import api_pb2 as registration
from dra_driver._proto.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, DriverNames
from dra_driver.k8s.errors import NotFoundError
from dra_driver.kubeletplugin import grpcserver, locking
from dra_driver.kubeletplugin.grpcserver import (
    MAX_SOCKET_PATH,
    PluginServer,
    SocketPathError,
    bind_owner_only,
    socket_paths,
)
from dra_driver.kubeletplugin.locking import LockTimeoutError, file_lock
from dra_driver.kubeletplugin.metrics import PluginMetrics
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.kubeletplugin.state import ClaimPreparer
from dra_driver.nvml.inventory import Card, Health

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
DRIVER = NAMES.driver
NODE = "node-a"
NAMESPACE = "default"
SERVICES = [
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
]


def card(minor: int, bus: int, health: Health = Health.HEALTHY, message: str | None = None) -> Card:
    return Card(
        uuid=f"GPU-aaaaaaaa-0000-4000-8000-{minor + 1:012x}",
        product_name="Tesla T4",
        memory_bytes=15 * 2**30,
        pci_bus_id=f"0000:{bus:02x}:00.0",
        minor=minor,
        index=minor,
        architecture="Turing",
        cuda_compute_capability="7.5",
        driver_version="550.54.15",
        health=health,
        health_message=message,
    )


CARDS = (card(0, 0x3B), card(1, 0xAF))


def claim(uid: str, name: str, share_id: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}
    if share_id is not None:
        result["shareID"] = share_id
        result["consumedCapacity"] = {"cores": "30", "memory": "5Gi"}
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


@dataclasses.dataclass
class Served:
    server: PluginServer
    registry_socket: Path
    dra_socket: Path
    claims: dict[str, dict[str, Any]]
    cards: list[Sequence[Card]]
    registry: CollectorRegistry

    def add_claim(self, name: str, share_id: str | None = None) -> str:
        uid = str(uuid.uuid4())
        self.claims[name] = claim(uid, name, share_id)
        return uid

    def channel(self, socket: Path | None = None) -> grpc.Channel:
        return grpc.insecure_channel(f"unix://{socket or self.dra_socket}")


def new_threads(before: set[threading.Thread]) -> list[str]:
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive()]


@pytest.fixture
def served(work_dir: Path) -> Iterator[Served]:
    registry_socket, dra_socket = socket_paths(work_dir / "reg", work_dir / "plugin", DRIVER, "")
    claims: dict[str, dict[str, Any]] = {}
    cards: list[Sequence[Card]] = [CARDS]

    def get_claim(namespace: str, name: str) -> dict[str, Any]:
        if name not in claims:
            raise NotFoundError("x", status=404)
        return claims[name]

    preparer = ClaimPreparer(
        NAMES,
        NODE,
        NodePaths(
            plugin_dir=work_dir / "plugin",
            cdi_root=work_dir / "cdi",
            driver_root=Path("/"),
            hami_core_library=work_dir / "libvgpu.so",
            mps_pipe_directory=work_dir / "mps",
        ),
        get_claim=get_claim,
        cards=lambda: cards[0],
        default_backend=Backend.HAMI_CORE,
    )
    preparer.start()
    registry = CollectorRegistry()
    for stale in (registry_socket, dra_socket):
        stale.parent.mkdir(parents=True, exist_ok=True)
        stale.write_text("left behind by a killed plugin")
    server = PluginServer(
        driver=DRIVER,
        node=NODE,
        registry_socket=registry_socket,
        dra_socket=dra_socket,
        preparer=preparer,
        cards=lambda: cards[0],
        metrics=PluginMetrics(registry),
    )
    server.start()
    try:
        yield Served(server, registry_socket, dra_socket, claims, cards, registry)
    finally:
        server.stop(grace=0)


def test_default_socket_paths() -> None:
    """Without a Pod UID the sockets are <registry>/<driver>-reg.sock and <plugin>/dra.sock."""
    assert socket_paths(Path("/reg"), Path("/plugin"), DRIVER, "") == (
        Path(f"/reg/{DRIVER}-reg.sock"),
        Path("/plugin/dra.sock"),
    )


def test_per_pod_socket_paths() -> None:
    """With a Pod UID both socket names carry it, so overlapping plugin Pods never collide."""
    pod = "8f0e2c1a-1111-4222-8333-944455556666"
    assert socket_paths(Path("/reg"), Path("/plugin"), DRIVER, pod) == (
        Path(f"/reg/{DRIVER}-{pod}-reg.sock"),
        Path(f"/plugin/dra-{pod}.sock"),
    )


@pytest.mark.parametrize("which", ["registry", "plugin"])
def test_too_long_socket_path_is_refused(which: str) -> None:
    """A socket path of 106 bytes raises SocketPathError naming it; 105 bytes is accepted."""
    name = "dra.sock" if which == "plugin" else f"{DRIVER}-reg.sock"
    longest = Path("/" + "d" * (MAX_SOCKET_PATH - len(name) - 2)) / name
    assert len(str(longest)) == MAX_SOCKET_PATH == 105
    short = Path("/s")
    dirs = {"registry": short, "plugin": short, which: longest.parent}
    assert longest in socket_paths(dirs["registry"], dirs["plugin"], DRIVER, "")
    too_long = Path(str(longest.parent) + "x") / name
    dirs[which] = too_long.parent
    with pytest.raises(SocketPathError) as caught:
        socket_paths(dirs["registry"], dirs["plugin"], DRIVER, "")
    assert str(caught.value) == (
        f"socket path {too_long} has 106 bytes; unix sockets allow 105: shorten --plugin-dir "
        "or --plugin-registry-dir"
    )


def test_the_socket_path_limit_is_the_one_grpc_enforces() -> None:
    """gRPC binds a unix socket path of MAX_SOCKET_PATH bytes and refuses one byte more."""
    directory = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    try:
        for size, binds in ((MAX_SOCKET_PATH, True), (MAX_SOCKET_PATH + 1, False)):
            path = directory / ("x" * (size - len(str(directory)) - 1))
            assert len(str(path)) == size
            server = grpc.server(futures.ThreadPoolExecutor(1))
            try:
                server.add_insecure_port(f"unix://{path}")
            except RuntimeError:
                assert not binds, f"gRPC refused {size} bytes"
            else:
                assert binds, f"gRPC bound {size} bytes"
            finally:
                server.stop(0)
    finally:
        shutil.rmtree(directory)


def test_socket_path_limit_counts_bytes_not_characters() -> None:
    """A path of 74 characters but 134 UTF-8 bytes is refused as longer than the limit."""
    directory = Path("/tmp/" + "\u00e9" * 60)
    assert len(str(directory / "dra.sock")) <= 105 < len(str(directory / "dra.sock").encode())
    with pytest.raises(SocketPathError):
        socket_paths(directory, directory, DRIVER, "")


def test_file_lock_excludes_a_second_holder(work_dir: Path) -> None:
    """A second thread blocks in file_lock until the first holder leaves its block."""
    lock = work_dir / "serialize.lock"
    first_in, release, second_trying, second_in = (threading.Event() for _ in range(4))
    order: list[tuple[str, float]] = []

    def first() -> None:
        with file_lock(lock):
            order.append(("first-acquired", time.monotonic()))
            first_in.set()
            release.wait(10)
            order.append(("first-releasing", time.monotonic()))

    def second() -> None:
        first_in.wait(10)
        second_trying.set()
        with file_lock(lock):
            order.append(("second-acquired", time.monotonic()))
            second_in.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    try:
        assert first_in.wait(10)
        assert second_trying.wait(10)
        assert not second_in.wait(0.3), "the second holder got the lock while the first held it"
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
    assert second_in.is_set()
    assert [step for step, _ in order] == ["first-acquired", "first-releasing", "second-acquired"]
    assert order[2][1] >= order[1][1]


def test_starts_over_stale_files_at_both_socket_paths(served: Served) -> None:
    """Regular files left at both socket paths are replaced by owner-only sockets that answer."""
    for path in (served.registry_socket, served.dra_socket):
        mode = path.stat().st_mode
        assert stat.S_ISSOCK(mode), path
        assert stat.S_IMODE(mode) == 0o600
    with served.channel(served.registry_socket) as channel:
        info = registration_grpc.RegistrationStub(channel).GetInfo(
            registration.InfoRequest(), timeout=5
        )
    assert info.name == DRIVER


def test_a_socket_is_owner_only_from_the_moment_it_is_bound(work_dir: Path) -> None:
    """Under a umask of 0 the socket file is still created without group or other access."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    path = work_dir / "bound.sock"
    previous = os.umask(0)
    try:
        bind_owner_only(server, path)
        assert os.umask(0) == 0, "the process umask was not restored"
    finally:
        os.umask(previous)
        server.stop(0)
    assert stat.S_ISSOCK(path.lstat().st_mode)
    assert stat.S_IMODE(path.lstat().st_mode) & 0o077 == 0


def test_get_info_describes_the_dra_plugin(served: Served) -> None:
    """GetInfo says DRAPlugin, the DRA socket as endpoint, and the services in preference order."""
    with served.channel(served.registry_socket) as channel:
        info = registration_grpc.RegistrationStub(channel).GetInfo(
            registration.InfoRequest(), timeout=5
        )
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(served.dra_socket)
    assert list(info.supported_versions) == SERVICES


def test_registration_status_sets_registered(served: Served) -> None:
    """A rejection leaves `registered` unset; an acceptance sets it."""
    with served.channel(served.registry_socket) as channel:
        stub = registration_grpc.RegistrationStub(channel)
        stub.NotifyRegistrationStatus(
            registration.RegistrationStatus(plugin_registered=False, error="no"), timeout=5
        )
        assert not served.server.registered.is_set()
        stub.NotifyRegistrationStatus(
            registration.RegistrationStatus(plugin_registered=True), timeout=5
        )
    assert served.server.registered.is_set()


def test_v1beta1_prepare_works_without_share_id(served: Served) -> None:
    """NodePrepareResources v1beta1 answers devices; its Device message has no share_id."""
    assert "share_id" not in dra_v1beta1.Device.DESCRIPTOR.fields_by_name
    share = str(uuid.uuid4())
    uid = served.add_claim("c1", share)
    request = dra_v1beta1.NodePrepareResourcesRequest(
        claims=[dra_v1beta1.Claim(namespace=NAMESPACE, uid=uid, name="c1")]
    )
    with served.channel() as channel:
        response = dra_v1beta1_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=5)
    assert response.claims[uid].error == ""
    (device,) = response.claims[uid].devices
    assert list(device.request_names) == ["gpu"]
    assert (device.pool_name, device.device_name) == (NODE, "gpu-0")
    assert list(device.cdi_device_ids) == [f"k8s.{DRIVER}/claim={uid}-gpu-0-{share}"]


def test_v1_prepare_carries_share_id(served: Served) -> None:
    """NodePrepareResources v1 sets share_id for a shared device and leaves it unset otherwise."""
    share = str(uuid.uuid4())
    shared, whole = served.add_claim("shared", share), served.add_claim("whole")
    request = dra_v1.NodePrepareResourcesRequest(
        claims=[
            dra_v1.Claim(namespace=NAMESPACE, uid=shared, name="shared"),
            dra_v1.Claim(namespace=NAMESPACE, uid=whole, name="whole"),
        ]
    )
    with served.channel() as channel:
        stub = dra_v1_grpc.DRAPluginStub(channel)
        response = stub.NodePrepareResources(request, timeout=5)
        (with_share,) = response.claims[shared].devices
        (without,) = response.claims[whole].devices
        assert with_share.HasField("share_id")
        assert with_share.share_id == share
        assert not without.HasField("share_id")
        assert list(without.cdi_device_ids) == [f"k8s.{DRIVER}/claim={whole}-gpu-0"]
        unprepared = stub.NodeUnprepareResources(
            dra_v1.NodeUnprepareResourcesRequest(
                claims=[dra_v1.Claim(namespace=NAMESPACE, uid=shared, name="shared")]
            ),
            timeout=5,
        )
    assert unprepared.claims[shared].error == ""
    assert served.registry.get_sample_value("gpushare_prepared_claims") == 1


def _health(message: Any) -> list[tuple[str, str, int, str]]:
    return [
        (d.device.pool_name, d.device.device_name, d.health, d.message) for d in message.devices
    ]


@pytest.mark.parametrize(
    ("module", "stub_class"),
    [
        pytest.param(health_v1alpha1, health_v1alpha1_grpc.DRAResourceHealthStub, id="v1alpha1"),
        pytest.param(health_v1, health_v1_grpc.DRAResourceHealthStub, id="v1"),
    ],
)
def test_health_stream_reports_a_card_turning_unhealthy(
    served: Served, module: ModuleType, stub_class: Any
) -> None:
    """The stream sends every card HEALTHY, then the list again once a card turns UNHEALTHY."""
    with served.channel() as channel:
        stream = stub_class(channel).NodeWatchResources(
            module.NodeWatchResourcesRequest(), timeout=10
        )
        first = next(stream)
        assert _health(first) == [
            (NODE, "gpu-0", module.HEALTHY, ""),
            (NODE, "gpu-1", module.HEALTHY, ""),
        ]
        assert abs(first.devices[0].last_updated_time - time.time()) < 60
        served.cards[0] = (CARDS[0], card(1, 0xAF, Health.UNHEALTHY, "XID 79"))
        second = next(stream)  # the stream polls every second; its 10 s deadline bounds a hang
        assert _health(second) == [
            (NODE, "gpu-0", module.HEALTHY, ""),
            (NODE, "gpu-1", module.UNHEALTHY, "XID 79"),
        ]
        stream.cancel()


def test_an_unchanged_health_list_is_sent_again_before_the_kubelet_forgets_it(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing changes, yet the list comes again, each device with the kubelet's timeout."""
    resend = grpcserver.HEALTH_RESEND_SECONDS
    monkeypatch.setattr(grpcserver, "HEALTH_RESEND_SECONDS", 0.5)
    with served.channel() as channel:
        stream = health_v1_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            health_v1.NodeWatchResourcesRequest(), timeout=10
        )
        first, second = next(stream), next(stream)  # the 10 s deadline bounds a stream gone quiet
        assert _health(second) == _health(first)
        assert second.devices[0].last_updated_time >= first.devices[0].last_updated_time
        timeouts = {d.health_check_timeout_seconds for d in (*first.devices, *second.devices)}
        assert timeouts == {grpcserver.HEALTH_TIMEOUT_SECONDS}
        assert 3 * resend <= grpcserver.HEALTH_TIMEOUT_SECONDS  # a lost message is forgiven
        stream.cancel()


def _prepare_then_stop_while_streaming(served: Served) -> None:
    """Prepare a claim, open a health stream, stop the server; check the stream ended."""
    uid = served.add_claim("c1", str(uuid.uuid4()))
    with served.channel() as channel:
        response = dra_v1_grpc.DRAPluginStub(channel).NodePrepareResources(
            dra_v1.NodePrepareResourcesRequest(
                claims=[dra_v1.Claim(namespace=NAMESPACE, uid=uid, name="c1")]
            ),
            timeout=5,
        )
        assert response.claims[uid].error == ""
        stream = health_v1_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            health_v1.NodeWatchResourcesRequest(), timeout=10
        )
        next(stream)
        served.server.stop(grace=2)
        try:
            assert list(stream) == []  # the stream ends rather than running into its timeout
        except grpc.RpcError as exc:
            # The server's connection can close before the client reads the trailers (the
            # client then fails its next write: "Stream removed"): an end all the same, which
            # the kubelet answers by reconnecting; the timeout would be DEADLINE_EXCEEDED.
            assert exc.code() is grpc.StatusCode.UNAVAILABLE, exc  # noqa: PT017


def test_stop_ends_streams_and_removes_both_sockets(served: Served) -> None:
    """stop() ends an open health stream and removes both sockets."""
    _prepare_then_stop_while_streaming(served)
    assert not served.registry_socket.exists()
    assert not served.dra_socket.exists()
    assert not served.dra_socket.is_symlink()


def test_stop_leaves_no_grpc_threads(served: Served) -> None:
    """After stop() no thread started while serving (handlers, grpc workers) is still alive."""
    before = set(threading.enumerate())
    _prepare_then_stop_while_streaming(served)
    deadline = time.monotonic() + 1
    while new_threads(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert new_threads(before) == []


def test_prepare_results_are_counted(served: Served) -> None:
    """One prepared and one failed claim count 1 success and 1 error; unprepare counts too."""
    counter = "gpushare_prepare_claims_total"
    assert served.registry.get_sample_value(counter, {"result": "success"}) == 0
    assert served.registry.get_sample_value(counter, {"result": "error"}) == 0
    good = served.add_claim("good", str(uuid.uuid4()))
    missing = str(uuid.uuid4())
    request = dra_v1.NodePrepareResourcesRequest(
        claims=[
            dra_v1.Claim(namespace=NAMESPACE, uid=good, name="good"),
            dra_v1.Claim(namespace=NAMESPACE, uid=missing, name="missing"),
        ]
    )
    with served.channel() as channel:
        stub = dra_v1_grpc.DRAPluginStub(channel)
        response = stub.NodePrepareResources(request, timeout=5)
        stub.NodeUnprepareResources(
            dra_v1.NodeUnprepareResourcesRequest(claims=request.claims[:1]), timeout=5
        )
    assert response.claims[good].error == ""
    assert response.claims[missing].error == f"claim {NAMESPACE}/missing not found"
    assert served.registry.get_sample_value(counter, {"result": "success"}) == 1
    assert served.registry.get_sample_value(counter, {"result": "error"}) == 1
    unprepared = "gpushare_unprepare_claims_total"
    assert served.registry.get_sample_value(unprepared, {"result": "success"}) == 1
    assert served.registry.get_sample_value(unprepared, {"result": "error"}) == 0
    assert served.registry.get_sample_value("gpushare_prepared_claims") == 0
    histogram = "gpushare_prepare_claim_duration_seconds_count"
    assert served.registry.get_sample_value(histogram, {"result": "error"}) == 1


def test_file_lock_gives_up_on_a_holder_that_never_lets_go(work_dir: Path) -> None:
    """Behind a stuck holder file_lock raises after its timeout, naming the lock file."""
    lock = work_dir / "serialize.lock"
    holder = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        started = time.monotonic()
        expected = r"serialize\.lock held by another process"
        with pytest.raises(LockTimeoutError, match=expected), file_lock(lock, timeout=0.2):
            pytest.fail("the lock was taken while another process held it")
        assert 0.2 <= time.monotonic() - started < 5
    finally:
        os.close(holder)
    with file_lock(lock, timeout=0.2):
        pass  # free again once the holder is gone


def test_a_stuck_node_lock_answers_each_claim_with_an_error(
    served: Served, work_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prepare behind a node lock nobody releases returns an error per claim, not a hang."""
    monkeypatch.setattr(locking, "DEFAULT_LOCK_TIMEOUT", 0.2)
    uid = served.add_claim("c1", str(uuid.uuid4()))
    holder = os.open(work_dir / "plugin" / "serialize.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        request = dra_v1.NodePrepareResourcesRequest(
            claims=[dra_v1.Claim(namespace=NAMESPACE, uid=uid, name="c1")]
        )
        with served.channel() as channel:
            response = dra_v1_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=5)
    finally:
        os.close(holder)
    assert "held by another process for over 0.2 s" in response.claims[uid].error
    assert not response.claims[uid].devices
