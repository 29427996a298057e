"""The kubelet-facing gRPC services on unix sockets.

- Registration (``<registry>/<driver>-reg.sock``): ``GetInfo`` says DRAPlugin, the DRA socket,
  and the services in preference order: ``v1.DRAPlugin``, ``v1beta1.DRAPlugin`` and the health
  services. The kubelet takes the first it supports.
- DRAPlugin v1 and v1beta1 on ``<plugin dir>/dra.sock``; the preparer holds the node-wide
  lock (``locking``) so two plugin Pods overlapping in a rolling update never interleave.
- DRAResourceHealth v1alpha1 and v1: a stream of the full device health list on every change.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import grpc

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
from dra_driver.kubeletplugin.entries import ClaimRef
from dra_driver.kubeletplugin.locking import LockTimeoutError
from dra_driver.kubeletplugin.metrics import PluginMetrics
from dra_driver.kubeletplugin.state import ClaimPreparer, Outcome
from dra_driver.logging import get_logger, pool_initializer
from dra_driver.nvml.card import Card, Health
from dra_driver.publishing.slices import device_name

log = get_logger(__name__)

_Result = TypeVar("_Result")

SERVICES: Final = (
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)
# A sun_path holds 108 bytes including the terminating NUL, but gRPC's own check refuses a
# unix socket path from 106 bytes on (grpcio 1.85; tests/kubeletplugin binds both lengths).
# Checked here first, so a long kubelet root is a clear error rather than a gRPC traceback.
MAX_SOCKET_PATH: Final = 105


class SocketPathError(ValueError):
    """A socket path is too long for a unix socket."""


def socket_paths(
    registry_dir: Path, plugin_dir: Path, driver: str, pod_uid: str
) -> tuple[Path, Path]:
    """Registration and DRA socket paths; per-Pod names when ``pod_uid`` is set."""
    if pod_uid:
        paths = (registry_dir / f"{driver}-{pod_uid}-reg.sock", plugin_dir / f"dra-{pod_uid}.sock")
    else:
        paths = (registry_dir / f"{driver}-reg.sock", plugin_dir / "dra.sock")
    for path in paths:
        size = len(os.fsencode(path))  # sun_path limits bytes, not characters
        if size > MAX_SOCKET_PATH:
            raise SocketPathError(
                f"socket path {path} has {size} bytes; unix sockets allow "
                f"{MAX_SOCKET_PATH}: shorten --plugin-dir or --plugin-registry-dir"
            )
    return paths


class _Registration(registration_grpc.RegistrationServicer):
    def __init__(self, driver: str, endpoint: Path, registered: threading.Event) -> None:
        self._driver, self._endpoint, self._registered = driver, endpoint, registered

    def GetInfo(  # noqa: N802 - gRPC method name
        self, request: registration.InfoRequest, context: grpc.ServicerContext
    ) -> registration.PluginInfo:
        return registration.PluginInfo(
            type="DRAPlugin",
            name=self._driver,
            endpoint=str(self._endpoint),
            supported_versions=list(SERVICES),
        )

    def NotifyRegistrationStatus(  # noqa: N802 - gRPC method name
        self, request: registration.RegistrationStatus, context: grpc.ServicerContext
    ) -> registration.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("registration.accepted")
            self._registered.set()
        else:
            log.error("registration.rejected", error=request.error)
        return registration.RegistrationStatusResponse()


class _DraPlugin:
    """The DRAPlugin service for one proto version (v1 and v1beta1 share everything else)."""

    def __init__(
        self,
        module: Any,  # noqa: ANN401 - the v1 or v1beta1 generated module
        preparer: ClaimPreparer,
        metrics: PluginMetrics,
    ) -> None:
        self._module, self._preparer, self._metrics = module, preparer, metrics

    def _each_claim(
        self,
        verb: str,
        claims: Sequence[Any],
        call: Callable[[list[ClaimRef]], dict[str, _Result]],
        failed: Callable[[str], _Result],
    ) -> tuple[dict[str, _Result], float]:
        """Run ``call`` on the claims; return each claim's result and its share of the time.

        A node lock that another plugin process holds too long fails the whole call.
        """
        started = time.perf_counter()
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in claims]
        try:
            results = call(refs)
        except LockTimeoutError as exc:
            log.error(f"{verb}.node_lock", error=str(exc))  # noqa: TRY400 - says it all
            results = {ref.uid: failed(str(exc)) for ref in refs}
        # The claims of one call are handled one after another: each gets its share of the time.
        return results, (time.perf_counter() - started) / max(1, len(results))

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802, ANN401
        """Prepare every claim of the request; each gets its own answer or error."""
        outcomes, per_claim = self._each_claim(
            "prepare", request.claims, self._preparer.prepare, lambda error: Outcome(error=error)
        )
        response = self._module.NodePrepareResourcesResponse()
        v1 = self._module is dra_v1
        for uid, outcome in outcomes.items():
            entry = response.claims[uid]
            entry.error = outcome.error
            for device in outcome.devices:
                message = self._module.Device(
                    request_names=list(device.request_names),
                    pool_name=device.pool_name,
                    device_name=device.device_name,
                    cdi_device_ids=list(device.cdi_device_ids),
                )
                if v1 and device.share_id:
                    message.share_id = device.share_id
                entry.devices.append(message)
            self._metrics.prepare.record(error=bool(outcome.error), seconds=per_claim)
        self._metrics.prepared_claims.set(len(self._preparer.prepared))
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802, ANN401
        """Unprepare every claim of the request."""
        errors, per_claim = self._each_claim(
            "unprepare", request.claims, self._preparer.unprepare, str
        )
        response = self._module.NodeUnprepareResourcesResponse()
        for uid, error in errors.items():
            response.claims[uid].error = error
            self._metrics.unprepare.record(error=bool(error), seconds=per_claim)
        self._metrics.prepared_claims.set(len(self._preparer.prepared))
        return response


HEALTH_RESEND_SECONDS: Final = 10.0
"""How often the whole device list is sent again though nothing changed."""
HEALTH_TIMEOUT_SECONDS: Final = 30
"""Told to the kubelet per device: a device not reported for this long becomes ``Unknown``."""


class _Health:
    """DRAResourceHealth: the whole device list on connect, on every change, and every 10 s.

    The kubelet holds a device's health for a limited time (``health_check_timeout_seconds``)
    and then reports it ``Unknown`` in the pods' status: an unchanged list must be sent again
    well before that, or every healthy card reads ``Unknown`` half a minute after connecting.
    """

    def __init__(
        self,
        module: Any,  # noqa: ANN401 - the v1 or v1alpha1 generated module
        node: str,
        cards: Callable[[], Sequence[Card]],
        stop: threading.Event,
    ) -> None:
        self._module, self._node, self._cards, self._stop = module, node, cards, stop

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802, ANN401
        """Stream the health of every card until the kubelet hangs up or the plugin stops."""
        last: list[tuple[str, str]] | None = None
        sent = 0.0
        while not self._stop.is_set() and context.is_active():
            cards = self._cards()
            state = [(device_name(c), str(c.health)) for c in cards]
            if state != last or time.monotonic() - sent >= HEALTH_RESEND_SECONDS:
                last, sent = state, time.monotonic()
                yield self._module.NodeWatchResourcesResponse(
                    devices=[self._device(c) for c in cards]
                )
            self._stop.wait(1.0)

    def _device(self, card: Card) -> Any:  # noqa: ANN401 - v1 or v1alpha1 message
        status = self._module.HEALTHY if card.health is Health.HEALTHY else self._module.UNHEALTHY
        return self._module.DeviceHealth(
            device=self._module.DeviceIdentifier(
                pool_name=self._node, device_name=device_name(card)
            ),
            health=status,
            last_updated_time=int(time.time()),
            message=(card.health_message or "")[:1024],
            health_check_timeout_seconds=HEALTH_TIMEOUT_SECONDS,
        )


def bind_owner_only(server: grpc.Server, path: Path) -> None:
    """Bind ``server`` to the unix socket ``path`` so that only its owner can ever connect.

    gRPC creates the socket file when the port is added, with the process umask: under a
    permissive umask the socket would accept anyone until a later chmod. The umask is
    process-wide, so it is narrowed only around the bind.
    """
    previous = os.umask(0o077)
    try:
        server.add_insecure_port(f"unix://{path}")
    finally:
        os.umask(previous)


class PluginServer:
    """Both sockets and all services; ``start`` binds over stale sockets, ``stop`` removes them."""

    def __init__(
        self,
        *,
        driver: str,
        node: str,
        registry_socket: Path,
        dra_socket: Path,
        preparer: ClaimPreparer,
        cards: Callable[[], Sequence[Card]],
        metrics: PluginMetrics,
    ) -> None:
        self.registered = threading.Event()
        self._stop = threading.Event()
        self._sockets = (registry_socket, dra_socket)
        # Kept: grpc never shuts down an executor it was given, so stop() must.
        self._executor = futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="grpc", initializer=pool_initializer()
        )
        self._server = grpc.server(self._executor)
        # One class serves both proto versions (same fields), hence the casts to each version's
        # generated servicer type.
        registration_grpc.add_RegistrationServicer_to_server(
            _Registration(driver, dra_socket, self.registered), self._server
        )
        dra_v1_grpc.add_DRAPluginServicer_to_server(
            cast(dra_v1_grpc.DRAPluginServicer, _DraPlugin(dra_v1, preparer, metrics)),
            self._server,
        )
        dra_v1beta1_grpc.add_DRAPluginServicer_to_server(
            cast(
                dra_v1beta1_grpc.DRAPluginServicer,
                _DraPlugin(dra_v1beta1, preparer, metrics),
            ),
            self._server,
        )
        health_v1_grpc.add_DRAResourceHealthServicer_to_server(
            cast(
                health_v1_grpc.DRAResourceHealthServicer,
                _Health(health_v1, node, cards, self._stop),
            ),
            self._server,
        )
        health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
            cast(
                health_v1alpha1_grpc.DRAResourceHealthServicer,
                _Health(health_v1alpha1, node, cards, self._stop),
            ),
            self._server,
        )

    def start(self) -> None:
        """Remove whatever is left at the socket paths, then serve."""
        for path in self._sockets:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() or path.is_symlink():
                log.info("socket.stale_removed", path=str(path))
                path.unlink()
            bind_owner_only(self._server, path)
        self._server.start()
        for path in self._sockets:
            path.chmod(0o600)
        log.info("grpc.serving", registration=str(self._sockets[0]), dra=str(self._sockets[1]))

    def stop(self, grace: float = 5.0) -> None:
        """Stop serving (in-flight calls get ``grace`` seconds) and remove the sockets."""
        self._stop.set()
        self._server.stop(grace).wait()
        self._executor.shutdown(wait=True)
        for path in self._sockets:
            path.unlink(missing_ok=True)
