"""The generated kubelet stubs speak exactly the upstream wire contract.

The kubelet addresses a plugin by gRPC method path and decodes messages by field number and wire
type, so package, service, method, field numbers, types and labels must match k8s.io/kubelet.
The expected tables below restate the upstream .proto files (k8s.io/kubelet pkg/apis/...).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from types import ModuleType
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor_pb2 import FieldDescriptorProto, FileDescriptorProto
from google.protobuf.unknown_fields import UnknownFieldSet

from dra_driver._proto.dra.v1 import api_pb2 as dra_v1
from dra_driver._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra_driver._proto.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_driver._proto.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from dra_driver._proto.dra_health.v1 import api_pb2 as health_v1
from dra_driver._proto.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from dra_driver._proto.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from dra_driver._proto.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from dra_driver._proto.pluginregistration.v1 import api_pb2 as reg_v1
from dra_driver._proto.pluginregistration.v1 import api_pb2_grpc as reg_v1_grpc

RPC_TIMEOUT_S = 5.0
DRIVER = "gpushare.dra.dev"
SHARE_ID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CDI_ID = "k8s.gpushare.dra.dev/claim=uid-gpu-0-sh"

# ---------------------------------------------------------------------------------------------
# Expected schema, written in .proto notation: "<label> <type> <name> = <number>".


def _dra_messages(*, share_id: bool) -> dict[str, list[str]]:
    """Messages of the DRAPlugin API; v1 differs from v1beta1 only by Device.share_id."""
    device = [
        "repeated string request_names = 1",
        "string pool_name = 2",
        "string device_name = 3",
        "repeated string cdi_device_ids = 4",
    ]
    if share_id:
        device.append("optional string share_id = 5")
    return {
        "NodePrepareResourcesRequest": ["repeated Claim claims = 1"],
        "NodePrepareResourcesResponse": ["map<string, NodePrepareResourceResponse> claims = 1"],
        "NodePrepareResourceResponse": ["repeated Device devices = 1", "string error = 2"],
        "Device": device,
        "NodeUnprepareResourcesRequest": ["repeated Claim claims = 1"],
        "NodeUnprepareResourcesResponse": ["map<string, NodeUnprepareResourceResponse> claims = 1"],
        "NodeUnprepareResourceResponse": ["string error = 1"],
        "Claim": ["string namespace = 1", "string uid = 2", "string name = 3"],
    }


DRA_RPCS = [
    "rpc NodePrepareResources(NodePrepareResourcesRequest) returns (NodePrepareResourcesResponse)",
    "rpc NodeUnprepareResources(NodeUnprepareResourcesRequest)"
    " returns (NodeUnprepareResourcesResponse)",
]

HEALTH_MESSAGES = {
    "NodeWatchResourcesRequest": [],
    "DeviceIdentifier": ["string pool_name = 1", "string device_name = 2"],
    "DeviceHealth": [
        "DeviceIdentifier device = 1",
        "HealthStatus health = 2",
        "int64 last_updated_time = 3",
        "int64 health_check_timeout_seconds = 4",
        "string message = 5",
    ],
    "NodeWatchResourcesResponse": ["repeated DeviceHealth devices = 1"],
}
HEALTH_ENUMS = {"HealthStatus": ["UNKNOWN = 0", "HEALTHY = 1", "UNHEALTHY = 2"]}
HEALTH_RPCS = [
    "rpc NodeWatchResources(NodeWatchResourcesRequest) returns (stream NodeWatchResourcesResponse)"
]

# module, proto package, messages, enums, services
Schema = dict[str, list[str]]
CONTRACT: dict[str, tuple[ModuleType, str, Schema, Schema, Schema]] = {
    "pluginregistration/v1": (
        reg_v1,
        "pluginregistration",
        {
            "PluginInfo": [
                "string type = 1",
                "string name = 2",
                "string endpoint = 3",
                "repeated string supported_versions = 4",
            ],
            "RegistrationStatus": ["bool plugin_registered = 1", "string error = 2"],
            "RegistrationStatusResponse": [],
            "InfoRequest": [],
        },
        {},
        {
            "Registration": [
                "rpc GetInfo(InfoRequest) returns (PluginInfo)",
                "rpc NotifyRegistrationStatus(RegistrationStatus)"
                " returns (RegistrationStatusResponse)",
            ]
        },
    ),
    "dra/v1": (
        dra_v1,
        "k8s.io.kubelet.pkg.apis.dra.v1",
        _dra_messages(share_id=True),
        {},
        {"DRAPlugin": DRA_RPCS},
    ),
    "dra/v1beta1": (
        dra_v1beta1,
        "k8s.io.kubelet.pkg.apis.dra.v1beta1",
        _dra_messages(share_id=False),
        {},
        {"DRAPlugin": DRA_RPCS},
    ),
    "dra-health/v1alpha1": (
        health_v1alpha1,
        "v1alpha1",
        HEALTH_MESSAGES,
        HEALTH_ENUMS,
        {"DRAResourceHealth": HEALTH_RPCS},
    ),
    "dra-health/v1": (
        health_v1,
        "v1",
        HEALTH_MESSAGES,
        HEALTH_ENUMS,
        {"DRAResourceHealth": HEALTH_RPCS},
    ),
}

# The paths the kubelet dials, and whether the server streams its answer.
METHOD_PATHS = {
    "/pluginregistration.Registration/GetInfo": False,
    "/pluginregistration.Registration/NotifyRegistrationStatus": False,
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources": False,
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources": False,
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources": False,
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources": False,
    "/v1alpha1.DRAResourceHealth/NodeWatchResources": True,
    "/v1.DRAResourceHealth/NodeWatchResources": True,
}

# ---------------------------------------------------------------------------------------------
# Rendering the generated descriptors in the same notation.


def _file_proto(module: ModuleType) -> FileDescriptorProto:
    """Return the FileDescriptorProto embedded in a generated _pb2 module."""
    return FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)


def _type_name(field: FieldDescriptorProto, package: str) -> str:
    """Proto type of a field, with message and enum names relative to the package."""
    if field.type in (FieldDescriptorProto.TYPE_MESSAGE, FieldDescriptorProto.TYPE_ENUM):
        return field.type_name.removeprefix(f".{package}.")
    return FieldDescriptorProto.Type.Name(field.type).removeprefix("TYPE_").lower()


def _render_messages(fdp: FileDescriptorProto) -> dict[str, list[str]]:
    """Each top-level message as a list of fields in .proto notation, ordered by number."""
    rendered: dict[str, list[str]] = {}
    for msg in fdp.message_type:
        map_entries = {f"{msg.name}.{n.name}": n for n in msg.nested_type if n.options.map_entry}
        for nested in msg.nested_type:
            if not nested.options.map_entry:
                rendered[f"{msg.name}.{nested.name}"] = ["<unexpected nested message>"]
        fields = []
        for field in sorted(msg.field, key=lambda f: f.number):
            type_name = _type_name(field, fdp.package)
            entry = map_entries.get(type_name)
            if entry is not None:
                key, value = (_type_name(f, fdp.package) for f in entry.field)
                decl = f"map<{key}, {value}>"
            elif field.label == FieldDescriptorProto.LABEL_REPEATED:
                decl = f"repeated {type_name}"
            elif field.proto3_optional:
                decl = f"optional {type_name}"
            elif field.HasField("oneof_index"):
                decl = f"oneof {msg.oneof_decl[field.oneof_index].name} {type_name}"
            else:
                decl = type_name
            fields.append(f"{decl} {field.name} = {field.number}")
        rendered[msg.name] = fields
    return rendered


def _render_enums(fdp: FileDescriptorProto) -> dict[str, list[str]]:
    """Each top-level enum as a list of "NAME = number"."""
    return {e.name: [f"{v.name} = {v.number}" for v in e.value] for e in fdp.enum_type}


def _render_services(fdp: FileDescriptorProto) -> dict[str, list[str]]:
    """Each service as a list of rpc declarations, streaming marked as in .proto."""
    rendered: dict[str, list[str]] = {}
    for svc in fdp.service:
        rpcs = []
        for m in svc.method:
            req = ("stream " if m.client_streaming else "") + _type_name_of(m.input_type, fdp)
            resp = ("stream " if m.server_streaming else "") + _type_name_of(m.output_type, fdp)
            rpcs.append(f"rpc {m.name}({req}) returns ({resp})")
        rendered[svc.name] = rpcs
    return rendered


def _type_name_of(full_name: str, fdp: FileDescriptorProto) -> str:
    """Return a message name relative to the file's package."""
    return full_name.removeprefix(f".{fdp.package}.")


class TestSchema:
    """Packages, messages, fields, enums and services equal the upstream definitions."""

    @pytest.mark.parametrize("api", list(CONTRACT))
    def test_package_and_syntax(self, api: str) -> None:
        """The proto package (it prefixes every gRPC path) and syntax match upstream."""
        module, package, *_ = CONTRACT[api]
        fdp = _file_proto(module)
        assert (fdp.package, fdp.syntax) == (package, "proto3")
        assert not fdp.dependency, "the kubelet APIs import nothing (gogoproto is dropped)"

    @pytest.mark.parametrize("api", list(CONTRACT))
    def test_messages(self, api: str) -> None:
        """Every message has exactly the upstream field names, numbers, types and labels."""
        module, _, messages, _, _ = CONTRACT[api]
        assert _render_messages(_file_proto(module)) == messages

    @pytest.mark.parametrize("api", list(CONTRACT))
    def test_enums(self, api: str) -> None:
        """Enums have exactly the upstream value names and numbers."""
        module, _, _, enums, _ = CONTRACT[api]
        assert _render_enums(_file_proto(module)) == enums

    @pytest.mark.parametrize("api", list(CONTRACT))
    def test_services(self, api: str) -> None:
        """Services have exactly the upstream rpcs, types and streaming flags."""
        module, _, _, _, services = CONTRACT[api]
        assert _render_services(_file_proto(module)) == services

    def test_method_paths(self) -> None:
        """The full gRPC method paths are the ones the kubelet dials, with their streaming."""
        paths = {}
        for module, *_ in CONTRACT.values():
            for svc in module.DESCRIPTOR.services_by_name.values():
                for m in svc.methods:
                    assert not m.client_streaming
                    paths[f"/{svc.full_name}/{m.name}"] = m.server_streaming
        assert paths == METHOD_PATHS

    def test_share_id_has_explicit_presence_in_v1_only(self) -> None:
        """v1 Device.share_id is a proto3 optional (presence tracked); v1beta1 has no such field."""
        assert dra_v1.Device.DESCRIPTOR.fields_by_name["share_id"].has_presence
        assert "share_id" not in dra_v1beta1.Device.DESCRIPTOR.fields_by_name


# ---------------------------------------------------------------------------------------------
# Golden bytes: tag = field_number << 3 | wire_type (0 = varint, 2 = length-delimited).


def _device_v1() -> dra_v1.Device:
    """Build a fully populated v1 Device as the plugin would return it."""
    return dra_v1.Device(
        request_names=["gpu"],
        pool_name="node-a",
        device_name="gpu-0",
        cdi_device_ids=[CDI_ID],
        share_id=SHARE_ID,
    )


DEVICE_V1_BYTES = (
    b"\x0a\x03gpu"  # 1 request_names, LEN 3
    b"\x12\x06node-a"  # 2 pool_name, LEN 6
    b"\x1a\x05gpu-0"  # 3 device_name, LEN 5
    b"\x22\x27k8s.gpushare.dra.dev/claim=uid-gpu-0-sh"  # 4 cdi_device_ids, LEN 39
    b"\x2a\x240f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"  # 5 share_id, LEN 36
)
ENDPOINT = f"/var/lib/kubelet/plugins/{DRIVER}/dra.sock"


class TestGoldenBytes:
    """Messages serialize to hand-computed protobuf wire bytes."""

    def test_v1_device(self) -> None:
        """A v1 Device encodes fields 1-5 with the expected tags and lengths."""
        assert _device_v1().SerializeToString() == DEVICE_V1_BYTES

    def test_plugin_info(self) -> None:
        """PluginInfo encodes type, name, endpoint and each supported version as fields 1-4."""
        info = reg_v1.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=ENDPOINT,
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )
        assert info.SerializeToString() == (
            b"\x0a\x09DRAPlugin"
            b"\x12\x10gpushare.dra.dev"
            b"\x1a\x32/var/lib/kubelet/plugins/gpushare.dra.dev/dra.sock"
            b"\x22\x0cv1.DRAPlugin"
            b"\x22\x11v1beta1.DRAPlugin"
        )

    def test_registration_status(self) -> None:
        """RegistrationStatus encodes plugin_registered as varint field 1 and error as field 2."""
        status = reg_v1.RegistrationStatus(plugin_registered=True, error="nope")
        assert status.SerializeToString() == b"\x08\x01\x12\x04nope"

    def test_claim(self) -> None:
        """Claim encodes namespace, uid and name as fields 1-3."""
        claim = dra_v1.Claim(namespace="default", uid="uid-1", name="c")
        assert claim.SerializeToString() == b"\x0a\x07default\x12\x05uid-1\x1a\x01c"

    @pytest.mark.parametrize("module", [dra_v1, dra_v1beta1], ids=["v1", "v1beta1"])
    def test_prepare_response_map(self, module: ModuleType) -> None:
        """The claims map is repeated field 1 of {1: key, 2: value} entries."""
        resp = module.NodePrepareResourcesResponse(
            claims={"uid-1": module.NodePrepareResourceResponse(error="boom")}
        )
        # entry (LEN 15) = key (0a 05 uid-1) + value (12 06 = [12 04 boom], error is field 2)
        assert resp.SerializeToString() == b"\x0a\x0f\x0a\x05uid-1\x12\x06\x12\x04boom"

    @pytest.mark.parametrize("module", [dra_v1, dra_v1beta1], ids=["v1", "v1beta1"])
    def test_unprepare_response_map(self, module: ModuleType) -> None:
        """The unprepare claims map value carries error as field 1."""
        resp = module.NodeUnprepareResourcesResponse(
            claims={"uid-1": module.NodeUnprepareResourceResponse(error="boom")}
        )
        assert resp.SerializeToString() == b"\x0a\x0f\x0a\x05uid-1\x12\x06\x0a\x04boom"

    def test_share_id_presence(self) -> None:
        """An explicitly empty share_id is sent (field 5, LEN 0); an unset one is not."""
        assert dra_v1.Device().SerializeToString() == b""
        assert dra_v1.Device(share_id="").SerializeToString() == b"\x2a\x00"

    @pytest.mark.parametrize("module", [health_v1, health_v1alpha1], ids=["v1", "v1alpha1"])
    def test_device_health(self, module: ModuleType) -> None:
        """DeviceHealth encodes the identifier, enum and int64 fields as upstream numbers them."""
        health = module.DeviceHealth(
            device=module.DeviceIdentifier(pool_name="node-a", device_name="gpu-0"),
            health=module.UNHEALTHY,
            last_updated_time=1_700_000_000,
            health_check_timeout_seconds=30,
            message="xid 79",
        )
        assert health.SerializeToString() == (
            b"\x0a\x0f\x0a\x06node-a\x12\x05gpu-0"  # 1 device, LEN 15
            b"\x10\x02"  # 2 health = UNHEALTHY
            b"\x18\x80\xe2\xcf\xaa\x06"  # 3 last_updated_time = 1700000000 (varint)
            b"\x20\x1e"  # 4 health_check_timeout_seconds = 30
            b"\x2a\x06xid 79"  # 5 message, LEN 6
        )


class TestCrossVersion:
    """Messages of neighbouring API versions interoperate on the wire."""

    def test_v1_device_parses_as_v1beta1(self) -> None:
        """A v1beta1 reader keeps all known fields and carries share_id as unknown field 5."""
        old = dra_v1beta1.Device.FromString(DEVICE_V1_BYTES)
        assert list(old.request_names) == ["gpu"]
        assert (old.pool_name, old.device_name) == ("node-a", "gpu-0")
        assert list(old.cdi_device_ids) == [CDI_ID]
        unknown = UnknownFieldSet(old)
        assert len(unknown) == 1
        assert (unknown[0].field_number, unknown[0].wire_type, unknown[0].data) == (
            5,
            2,
            SHARE_ID.encode(),
        )
        assert old.SerializeToString() == DEVICE_V1_BYTES

    def test_v1beta1_device_parses_as_v1_without_share_id(self) -> None:
        """Bytes from a v1beta1 writer parse as v1 with share_id absent."""
        old = dra_v1beta1.Device(pool_name="node-a", device_name="gpu-0", cdi_device_ids=[CDI_ID])
        new = dra_v1.Device.FromString(old.SerializeToString())
        assert not new.HasField("share_id")
        assert new.SerializeToString() == old.SerializeToString()

    def test_v1_prepare_response_parses_as_v1beta1(self) -> None:
        """A whole v1 NodePrepareResourcesResponse parses as v1beta1 with devices intact."""
        resp = dra_v1.NodePrepareResourcesResponse(
            claims={"uid-1": dra_v1.NodePrepareResourceResponse(devices=[_device_v1()])}
        )
        old = dra_v1beta1.NodePrepareResourcesResponse.FromString(resp.SerializeToString())
        (device,) = old.claims["uid-1"].devices
        assert (device.device_name, list(device.cdi_device_ids)) == ("gpu-0", [CDI_ID])

    def test_health_v1_and_v1alpha1_bytes_are_identical(self) -> None:
        """The v1 and v1alpha1 health responses have the same encoding."""
        msgs = [
            m.NodeWatchResourcesResponse(
                devices=[
                    m.DeviceHealth(
                        device=m.DeviceIdentifier(pool_name="p", device_name="d"),
                        health=m.HEALTHY,
                        last_updated_time=5,
                    )
                ]
            ).SerializeToString()
            for m in (health_v1, health_v1alpha1)
        ]
        assert msgs[0] == msgs[1] != b""


# ---------------------------------------------------------------------------------------------
# A real gRPC round trip over a unix socket, through the generated _grpc modules.


class _Registration(reg_v1_grpc.RegistrationServicer):
    """Answers GetInfo and records NotifyRegistrationStatus calls."""

    def __init__(self) -> None:
        self.statuses: list[reg_v1.RegistrationStatus] = []

    def GetInfo(  # noqa: N802 - gRPC method name
        self, _request: reg_v1.InfoRequest, _context: grpc.ServicerContext
    ) -> reg_v1.PluginInfo:
        """Describe the plugin as a DRA driver."""
        return reg_v1.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=ENDPOINT,
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )

    def NotifyRegistrationStatus(  # noqa: N802 - gRPC method name
        self, request: reg_v1.RegistrationStatus, _context: grpc.ServicerContext
    ) -> reg_v1.RegistrationStatusResponse:
        """Remember what the kubelet reported."""
        self.statuses.append(request)
        return reg_v1.RegistrationStatusResponse()


def _make_dra_servicer(module: ModuleType, grpc_module: ModuleType, *, share_id: bool) -> Any:
    """Build a DRAPlugin servicer for one API version that prepares one device per claim."""

    class _DRAPlugin(grpc_module.DRAPluginServicer):  # type: ignore[misc,name-defined]
        def NodePrepareResources(  # noqa: N802
            self,
            request: Any,
            _context: grpc.ServicerContext,
        ) -> Any:
            """Give every claim one device whose CDI name embeds the claim UID."""
            resp = module.NodePrepareResourcesResponse()
            for claim in request.claims:
                device = module.Device(
                    request_names=["gpu"],
                    pool_name="node-a",
                    device_name="gpu-0",
                    cdi_device_ids=[f"k8s.gpushare.dra.dev/claim={claim.uid}-gpu-0"],
                )
                if share_id:
                    device.share_id = SHARE_ID
                resp.claims[claim.uid].devices.append(device)
            return resp

        def NodeUnprepareResources(  # noqa: N802
            self,
            request: Any,
            _context: grpc.ServicerContext,
        ) -> Any:
            """Unprepare succeeds for every claim, except for one named "bad"."""
            resp = module.NodeUnprepareResourcesResponse()
            for claim in request.claims:
                resp.claims[claim.uid].error = "cannot" if claim.name == "bad" else ""
            return resp

    return _DRAPlugin()


def _make_health_servicer(module: ModuleType, grpc_module: ModuleType) -> Any:
    """Build a DRAResourceHealth servicer that streams two snapshots, then ends."""

    class _Health(grpc_module.DRAResourceHealthServicer):  # type: ignore[misc,name-defined]
        def NodeWatchResources(  # noqa: N802
            self,
            _request: Any,
            _context: grpc.ServicerContext,
        ) -> Any:
            """Stream HEALTHY, then UNHEALTHY, for one device."""
            for status in (module.HEALTHY, module.UNHEALTHY):
                yield module.NodeWatchResourcesResponse(
                    devices=[
                        module.DeviceHealth(
                            device=module.DeviceIdentifier(pool_name="node-a", device_name="gpu-0"),
                            health=status,
                            last_updated_time=1_700_000_000,
                        )
                    ]
                )

    return _Health()


class _Plugin:
    """A running gRPC server with every kubelet-facing service, and a channel to it."""

    def __init__(self, channel: grpc.Channel, registration: _Registration) -> None:
        self.channel = channel
        self.registration = registration


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Plugin]:
    """Serve all five kubelet services on one unix socket; stop everything afterwards."""
    socket = tmp_path_factory.mktemp("grpc") / "dra.sock"
    assert len(str(socket)) < 100, f"unix socket path too long: {socket}"
    threads_before = set(threading.enumerate())
    executor = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="proto-test")
    server = grpc.server(executor)
    registration = _Registration()
    reg_v1_grpc.add_RegistrationServicer_to_server(registration, server)
    dra_v1_grpc.add_DRAPluginServicer_to_server(
        _make_dra_servicer(dra_v1, dra_v1_grpc, share_id=True), server
    )
    dra_v1beta1_grpc.add_DRAPluginServicer_to_server(
        _make_dra_servicer(dra_v1beta1, dra_v1beta1_grpc, share_id=False), server
    )
    health_v1_grpc.add_DRAResourceHealthServicer_to_server(
        _make_health_servicer(health_v1, health_v1_grpc), server
    )
    health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
        _make_health_servicer(health_v1alpha1, health_v1alpha1_grpc), server
    )
    channel: grpc.Channel | None = None
    try:
        assert server.add_insecure_port(f"unix://{socket}") == 1
        server.start()
        channel = grpc.insecure_channel(f"unix://{socket}")
        yield _Plugin(channel, registration)
    finally:
        if channel is not None:
            channel.close()
        server.stop(grace=None).wait(RPC_TIMEOUT_S)
        executor.shutdown(wait=True)
    leaked = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    for thread in leaked:
        thread.join(RPC_TIMEOUT_S)
    assert not [t.name for t in leaked if t.is_alive()], "threads outlived the gRPC server"


class TestRoundTrip:
    """The generated stubs and servicer glue talk to each other over a real socket."""

    def test_get_info(self, plugin: _Plugin) -> None:
        """Registration.GetInfo returns the servicer's PluginInfo through the stub."""
        info = reg_v1_grpc.RegistrationStub(plugin.channel).GetInfo(
            reg_v1.InfoRequest(), timeout=RPC_TIMEOUT_S
        )
        assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, ENDPOINT)
        assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]

    def test_notify_registration_status(self, plugin: _Plugin) -> None:
        """NotifyRegistrationStatus delivers the kubelet's verdict to the servicer."""
        status = reg_v1.RegistrationStatus(plugin_registered=False, error="version mismatch")
        resp = reg_v1_grpc.RegistrationStub(plugin.channel).NotifyRegistrationStatus(
            status, timeout=RPC_TIMEOUT_S
        )
        assert resp == reg_v1.RegistrationStatusResponse()
        assert plugin.registration.statuses[-1] == status

    def test_v1_prepare(self, plugin: _Plugin) -> None:
        """v1 NodePrepareResources answers per claim UID with devices and share_id."""
        req = dra_v1.NodePrepareResourcesRequest(
            claims=[
                dra_v1.Claim(namespace="ns", uid="uid-a", name="a"),
                dra_v1.Claim(namespace="ns", uid="uid-b", name="b"),
            ]
        )
        resp = dra_v1_grpc.DRAPluginStub(plugin.channel).NodePrepareResources(
            req, timeout=RPC_TIMEOUT_S
        )
        assert sorted(resp.claims) == ["uid-a", "uid-b"]
        (device,) = resp.claims["uid-b"].devices
        assert list(device.cdi_device_ids) == ["k8s.gpushare.dra.dev/claim=uid-b-gpu-0"]
        assert device.HasField("share_id")
        assert device.share_id == SHARE_ID
        assert resp.claims["uid-b"].error == ""

    def test_v1_unprepare(self, plugin: _Plugin) -> None:
        """v1 NodeUnprepareResources reports a per-claim error keyed by claim UID."""
        req = dra_v1.NodeUnprepareResourcesRequest(
            claims=[
                dra_v1.Claim(namespace="ns", uid="uid-a", name="a"),
                dra_v1.Claim(namespace="ns", uid="uid-x", name="bad"),
            ]
        )
        resp = dra_v1_grpc.DRAPluginStub(plugin.channel).NodeUnprepareResources(
            req, timeout=RPC_TIMEOUT_S
        )
        assert {uid: r.error for uid, r in resp.claims.items()} == {"uid-a": "", "uid-x": "cannot"}

    def test_v1beta1_prepare(self, plugin: _Plugin) -> None:
        """v1beta1 NodePrepareResources is served alongside v1 on the same socket."""
        req = dra_v1beta1.NodePrepareResourcesRequest(
            claims=[dra_v1beta1.Claim(namespace="ns", uid="uid-c", name="c")]
        )
        resp = dra_v1beta1_grpc.DRAPluginStub(plugin.channel).NodePrepareResources(
            req, timeout=RPC_TIMEOUT_S
        )
        (device,) = resp.claims["uid-c"].devices
        assert device.device_name == "gpu-0"
        assert not UnknownFieldSet(device), "the v1beta1 servicer must not send share_id"

    @pytest.mark.parametrize(
        ("stub_module", "module"),
        [(health_v1_grpc, health_v1), (health_v1alpha1_grpc, health_v1alpha1)],
        ids=["v1", "v1alpha1"],
    )
    def test_health_stream(
        self, plugin: _Plugin, stub_module: ModuleType, module: ModuleType
    ) -> None:
        """NodeWatchResources streams every snapshot the servicer yields, in order."""
        stream = stub_module.DRAResourceHealthStub(plugin.channel).NodeWatchResources(
            module.NodeWatchResourcesRequest(), timeout=RPC_TIMEOUT_S
        )
        healths = [resp.devices[0].health for resp in stream]
        assert healths == [module.HEALTHY, module.UNHEALTHY]

    @pytest.mark.parametrize("path", list(METHOD_PATHS))
    def test_literal_kubelet_path_is_served(self, plugin: _Plugin, path: str) -> None:
        """A call to the literal upstream method path (as the kubelet makes it) is answered."""

        def raw(data: bytes) -> bytes:
            return data

        if METHOD_PATHS[path]:
            stream_call = plugin.channel.unary_stream(
                path, request_serializer=raw, response_deserializer=raw
            )
            answers = list(stream_call(b"", timeout=RPC_TIMEOUT_S))
            assert len(answers) == 2
        else:
            call = plugin.channel.unary_unary(
                path, request_serializer=raw, response_deserializer=raw
            )
            answer = call(b"", timeout=RPC_TIMEOUT_S)
            assert isinstance(answer, bytes)

    def test_unknown_path_is_unimplemented(self, plugin: _Plugin) -> None:
        """A path outside the contract is rejected, so the literal-path test can fail."""
        call = plugin.channel.unary_unary(
            "/k8s.io.kubelet.pkg.apis.dra.v2.DRAPlugin/Nope",
            request_serializer=bytes,
            response_deserializer=bytes,
        )
        with pytest.raises(grpc.RpcError) as excinfo:
            call(b"", timeout=RPC_TIMEOUT_S)
        assert excinfo.value.code() == grpc.StatusCode.UNIMPLEMENTED
