"""The kubelet's plugin watcher: registration of DRA drivers through their sockets.

Like the real one: every socket in the registry directory (dot files excluded) is asked
``GetInfo``; a ``DRAPlugin`` listing a DRAPlugin service the kubelet supports (the first such
in the plugin's order wins) is accepted and told so with ``NotifyRegistrationStatus``; removing
the socket deregisters the driver.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any, Final

import grpc

from dra_driver._proto.dra.v1 import api_pb2 as dra_v1
from dra_driver._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra_driver._proto.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_driver._proto.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from dra_driver._proto.pluginregistration.v1 import api_pb2 as registration
from dra_driver._proto.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from dra_driver.k8s.objects import Object
from dra_driver.logging import get_logger

log = get_logger(__name__)


SUPPORTED_SERVICES: Final = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
_RPC_TIMEOUT_SECONDS: Final = 45.0
_WATCH_INTERVAL_SECONDS: Final = 0.05


@dataclasses.dataclass
class RegisteredPlugin:
    """A DRA driver the kubelet has accepted."""

    driver: str
    endpoint: str
    service: str
    channel: grpc.Channel

    def _api(self) -> tuple[Any, Any]:
        """Return the message module and stub class of the negotiated service version."""
        if self.service == "v1.DRAPlugin":
            return dra_v1, dra_v1_grpc.DRAPluginStub
        return dra_v1beta1, dra_v1beta1_grpc.DRAPluginStub

    def prepare(self, claims: list[Object]) -> dict[str, Any]:
        """Call NodePrepareResources for ``claims``; return the per-claim-UID responses."""
        module, stub = self._api()
        request = module.NodePrepareResourcesRequest(
            claims=[_claim_message(module, c) for c in claims]
        )
        response = stub(self.channel).NodePrepareResources(request, timeout=_RPC_TIMEOUT_SECONDS)
        return dict(response.claims)

    def unprepare(self, claim: Object) -> str:
        """Call NodeUnprepareResources for one claim; return its error ("" on success)."""
        module, stub = self._api()
        request = module.NodeUnprepareResourcesRequest(claims=[_claim_message(module, claim)])
        response = stub(self.channel).NodeUnprepareResources(request, timeout=_RPC_TIMEOUT_SECONDS)
        return str(response.claims[claim["uid"]].error)


def _claim_message(module: Any, claim: Object) -> Any:  # noqa: ANN401 - v1 or v1beta1 message
    return module.Claim(namespace=claim["namespace"], uid=claim["uid"], name=claim["name"])


class PluginWatcher:
    """Keeps :attr:`plugins` (driver name -> plugin) in step with the registry directory."""

    def __init__(self, registry_dir: Path, node_name: str) -> None:
        self.plugins: dict[str, RegisteredPlugin] = {}
        self._registry_dir = registry_dir
        self._node_name = node_name
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        # Registration socket -> driver name, for deregistration when the socket goes away.
        self._registered_sockets: dict[Path, str] = {}
        self._thread = threading.Thread(
            target=self._watch_registry, name=f"plugin-watcher-{node_name}", daemon=True
        )

    def start(self) -> None:
        """Start polling the registry directory."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling and close every plugin connection."""
        self._stopping.set()
        self._thread.join()
        with self._lock:
            for plugin in self.plugins.values():
                plugin.channel.close()
            self.plugins.clear()

    def _watch_registry(self) -> None:
        while not self._stopping.wait(_WATCH_INTERVAL_SECONDS):
            sockets = (
                {p for p in self._registry_dir.glob("*.sock") if not p.name.startswith(".")}
                if self._registry_dir.is_dir()
                else set()
            )
            with self._lock:
                registered_sockets = set(self._registered_sockets)
            for socket in sockets - registered_sockets:
                self._register(socket)
            for socket in registered_sockets - sockets:
                self._deregister(socket)

    def _register(self, socket: Path) -> None:
        try:
            with grpc.insecure_channel(f"unix://{socket}") as channel:
                stub = registration_grpc.RegistrationStub(channel)
                info = stub.GetInfo(registration.InfoRequest(), timeout=5)
                service = next(
                    (v for v in info.supported_versions if v in SUPPORTED_SERVICES), None
                )
                error = ""
                if info.type != "DRAPlugin":
                    error = f"plugin type {info.type!r} is not DRAPlugin"
                elif service is None:
                    error = (
                        f"none of services supported by the plugin {list(info.supported_versions)} "
                        f"are supported by the kubelet {list(SUPPORTED_SERVICES)}"
                    )
                stub.NotifyRegistrationStatus(
                    registration.RegistrationStatus(plugin_registered=not error, error=error),
                    timeout=5,
                )
        except grpc.RpcError as exc:
            log.info("kubelet.plugin_not_ready", socket=str(socket), error=str(exc.code()))
            return
        if error or service is None:
            log.warning("kubelet.plugin_rejected", socket=str(socket), error=error)
            return
        plugin = RegisteredPlugin(
            info.name, info.endpoint, service, grpc.insecure_channel(f"unix://{info.endpoint}")
        )
        with self._lock:
            self._registered_sockets = {**self._registered_sockets, socket: info.name}
            old = self.plugins.get(info.name)
            self.plugins[info.name] = plugin
        if old is not None:
            old.channel.close()
        log.info(
            "kubelet.plugin_registered", driver=info.name, service=service, node=self._node_name
        )

    def _deregister(self, socket: Path) -> None:
        with self._lock:
            driver = self._registered_sockets.get(socket)
            self._registered_sockets = {
                k: v for k, v in self._registered_sockets.items() if k != socket
            }
            plugin = self.plugins.pop(driver, None) if driver else None
        if plugin is not None:
            plugin.channel.close()
