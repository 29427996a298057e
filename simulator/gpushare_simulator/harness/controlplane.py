"""A real Kubernetes control plane on 127.0.0.1, and real kubelets, for tests and ``simulate``.

:class:`RealControlPlane` starts a real etcd, kube-apiserver, kube-controller-manager and
kube-scheduler (the last two where the binaries have them: envtest ships the first two alone)
from :class:`~gpushare_simulator.harness.kubebin.KubeBinaries`, on random free loopback ports,
with a throwaway PKI made by the ``openssl`` CLI, every DRA feature gate the driver uses (per
release, see :func:`feature_gates`, plus any ``extra_gates``: ``DRAConsumableCapacity=False``
is a 1.34/1.35 cluster as shipped) and an admin kubeconfig. :meth:`RealControlPlane.add_node`
starts a real kubelet for a node (:mod:`gpushare_simulator.harness.hollownode`). Components
can be restarted (an API server restart; new gates on the same etcd, as an upgrade) and all
stop on exit (SIGTERM, then SIGKILL after a grace period). tests/README.md describes it.

Usage::

    with RealControlPlane(kubebin.prepare(directory), tmp_path) as plane:
        api = plane.api_client()
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, TypeAlias

from kubernetes import client, config

from dra_driver.k8s.client import TimedApiClient, bounded_retries
from dra_driver.k8s.settings import ApiTimeouts
from gpushare_simulator.harness._controlplane_setup import (
    MIN_VERSION,
    NEWEST_KNOWN_VERSION,
    ControlPlaneError,
    Layout,
    Pki,
    client_cert,
    component_commands,
    feature_gates,
    gates_flag,
    gates_with,
    generate_pki,
    kubeconfig_yaml,
    parse_kube_version,
    runtime_config,
)
from gpushare_simulator.harness.hollownode import HollowNode
from gpushare_simulator.harness.kubebin import KUBELET, KubeBinaries
from gpushare_simulator.harness.lifecycle import Lifecycle
from gpushare_simulator.harness.spawn import LoggedProcess

__all__ = [
    "MIN_VERSION",
    "NEWEST_KNOWN_VERSION",
    "ControlPlaneError",
    "KubeBinaries",
    "Layout",
    "Pki",
    "RealControlPlane",
    "component_commands",
    "detect_kube_version",
    "feature_gates",
    "gates_flag",
    "generate_pki",
    "kubeconfig_yaml",
    "parse_kube_version",
    "runtime_config",
]

LOG_TAIL_LINES: Final = 25
_PROBE_TIMEOUT_S: Final = 5.0
_POLL_INTERVAL_S: Final = 0.25
_HTTP_OK: Final = 200
_Probe: TypeAlias = Callable[[], tuple[bool, str]]


def detect_kube_version(apiserver: Path) -> tuple[int, int]:
    """Return (major, minor) that ``kube-apiserver --version`` reports."""
    try:
        result = subprocess.run(
            [str(apiserver), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ControlPlaneError(f"cannot run {apiserver} --version: {error}") from error
    if result.returncode != 0:
        raise ControlPlaneError(
            f"{apiserver} --version exited {result.returncode}: {result.stderr.strip()}"
        )
    return parse_kube_version(result.stdout)


def _accepts(binary: Path, flag: str) -> bool:
    """Whether ``binary --help`` mentions ``flag`` (Go's flag package prints one dash)."""
    try:
        result = subprocess.run(
            [str(binary), "--help"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    return flag.lstrip("-") in result.stdout + result.stderr


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free TCP ports on 127.0.0.1.

    They are free when returned; another process could take one before the component binds it
    (then that component fails to start and the error shows its log).
    """
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class RealControlPlane(Lifecycle):
    """A real etcd, kube-apiserver, and where given kube-controller-manager and kube-scheduler.

    ``work_dir`` receives the PKI, etcd's data, the kubeconfig, one log per component
    (``logs/<name>.log``) and the nodes' root directories (``nodes/<name>``).
    ``kube_version_hint`` (``"1.36"``) replaces asking ``kube-apiserver --version``, for builds
    that report no usable version; ``extra_gates`` are set on top of :func:`feature_gates`.
    ``apiserver_flags`` are added to kube-apiserver's command line (an audit log, for
    benchmarks). ``timeout_s`` bounds the whole start-up; ``grace_s`` is how long each
    component may take to exit on SIGTERM before it is killed. A context manager.
    """

    def __init__(
        self,
        binaries: KubeBinaries,
        work_dir: Path,
        kube_version_hint: str | None = None,
        *,
        extra_gates: Mapping[str, bool] | None = None,
        apiserver_flags: Sequence[str] = (),
        timeout_s: float = 120.0,
        grace_s: float = 10.0,
    ) -> None:
        self.binaries = binaries
        self.work_dir = work_dir
        self.kube_version_hint = kube_version_hint
        self.extra_gates = dict(extra_gates or {})
        self.apiserver_flags = tuple(apiserver_flags)
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.version: tuple[int, int] | None = None
        self.nodes: dict[str, HollowNode] = {}
        self._layout: Layout | None = None
        self._components: dict[str, LoggedProcess] = {}
        self._etcd_cluster_flag = True

    @property
    def layout(self) -> Layout:
        """Ports and paths; available once started."""
        if self._layout is None:
            raise ControlPlaneError("the control plane is not started")
        return self._layout

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user in group ``system:masters``)."""
        return self.layout.kubeconfig

    @property
    def url(self) -> str:
        """The API server's URL, ``https://127.0.0.1:<port>``."""
        return self.layout.url

    def api_client(self, kubeconfig: Path | None = None) -> TimedApiClient:
        """Return a new API client (the admin's by default), bounded as components' are."""
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig or self.kubeconfig), client_configuration=configuration
        )
        bounded_retries(configuration)
        return TimedApiClient(configuration, ApiTimeouts())

    def start(self) -> None:
        """Start every component and wait until all are ready; on any failure stop them all."""
        # Asked before the clock starts: it runs a binary, which is not start-up time.
        self._etcd_cluster_flag = _accepts(self.binaries.path("etcd"), "--initial-cluster")
        deadline = time.monotonic() + self.timeout_s
        self._stop_on_failure(lambda: self._start(deadline))

    def _gates(self) -> dict[str, bool]:
        if self.version is None:
            raise ControlPlaneError("the control plane is not started")
        return gates_with(feature_gates(self.version), self.extra_gates)

    def _start(self, deadline: float) -> None:
        hint = self.kube_version_hint
        apiserver = self.binaries.path("kube-apiserver")
        self.version = parse_kube_version(hint) if hint else detect_kube_version(apiserver)
        if self.version == (0, 0):
            raise ControlPlaneError(
                "kube-apiserver --version reports v0.0.0 (a development build?); pass "
                "kube_version_hint with the release it was built from, e.g. '1.36'"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "logs").mkdir(exist_ok=True)
        layout = Layout(self.work_dir, *free_ports(5))
        self._layout = layout
        pki = generate_pki(layout.pki.ca_cert.parent)
        layout.kubeconfig.write_text(kubeconfig_yaml(layout.url, pki))
        self._launch(self._commands(), deadline)
        # Pods need the default ServiceAccount, which the controller manager creates.
        if "kube-controller-manager" in self._components:
            sa_path = "/api/v1/namespaces/default/serviceaccounts/default"
            self._wait("default ServiceAccount", self._probe_of("", sa_path), deadline)

    def _commands(self) -> dict[str, list[str]]:
        commands = component_commands(
            self.binaries.paths,
            self.layout,
            self._gates(),
            etcd_cluster_flag=self._etcd_cluster_flag,
            runtime=runtime_config(self.version or MIN_VERSION),
        )
        commands["kube-apiserver"] += self.apiserver_flags
        return commands

    def _probe_of(self, name: str, path: str | None = None) -> _Probe:
        layout, pki = self.layout, self.layout.pki
        probes: dict[str, _Probe] = {
            "etcd": lambda: _probe(None, layout.etcd_client_port, "/health", '"health":"true"'),
            "kube-apiserver": lambda: _probe(pki, layout.apiserver_port, "/readyz", "ok"),
            "kube-controller-manager": lambda: _probe(
                pki, layout.controller_manager_port, "/healthz", "ok"
            ),
            "kube-scheduler": lambda: _probe(pki, layout.scheduler_port, "/healthz", "ok"),
        }
        if path is not None:
            return lambda: _probe(pki, layout.apiserver_port, path, "")
        return probes[name]

    def _launch(self, commands: Mapping[str, list[str]], deadline: float) -> None:
        for name, command in commands.items():
            log = self.work_dir / "logs" / f"{name}.log"
            component = LoggedProcess(name, command, log)
            component.start()
            self._components[name] = component
            if name in ("etcd", "kube-apiserver"):  # later components need these to be up
                self._wait(name, self._probe_of(name), deadline)
        for name in commands:
            if name not in ("etcd", "kube-apiserver"):
                self._wait(name, self._probe_of(name), deadline)

    def restart(self, names: tuple[str, ...] = ("kube-apiserver",), *, kill: bool = False) -> None:
        """Stop ``names`` (SIGKILL with ``kill``) and start them again with the current gates.

        Ports, PKI and etcd's data stay: clients reconnect to the same address. Use
        :attr:`extra_gates` before it to restart with other gates (an upgrade).
        """
        deadline = time.monotonic() + self.timeout_s
        for name in reversed(names):
            component = self._components.pop(name)
            component.stop(0.0 if kill else self.grace_s, kill=kill)
        commands = self._commands()
        self._launch({name: commands[name] for name in names}, deadline)

    def add_node(self, name: str, labels: dict[str, str] | None = None) -> HollowNode:
        """Start a real kubelet for node ``name`` and wait until its Node is Ready."""
        pki = self.layout.pki
        cert, key = client_cert(pki, f"node-{name}", f"/O=system:nodes/CN=system:node:{name}")
        kubeconfig = self.work_dir / f"node-{name}.kubeconfig"
        kubeconfig.write_text(kubeconfig_yaml(self.url, pki, cert, key))
        node = HollowNode(
            self.binaries.path(KUBELET),
            name,
            self.work_dir / name,  # short: plugin sockets live in it
            self.work_dir / "nodes" / name,
            kubeconfig,
            port=free_ports(1)[0],
            labels=labels,
        )
        self.nodes[name] = node
        node.start()
        with self.api_client() as api:
            node.wait_ready(api)
        return node

    def _wait(self, what: str, probe: _Probe, deadline: float) -> None:
        last = "no answer yet"
        while True:
            for component in self._components.values():
                code = component.process.poll() if component.process else None
                if code is not None:
                    raise ControlPlaneError(
                        f"{component.name} exited with status {code} while waiting for {what}; "
                        f"log tails follow\n{self._tails()}"
                    )
            ready, last = probe()
            if ready:
                return
            if time.monotonic() >= deadline:
                raise ControlPlaneError(
                    f"{what} not ready within {self.timeout_s:g} s (last answer: {last}); "
                    f"log tails follow\n{self._tails()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _tails(self) -> str:
        return "\n".join(c.tail(LOG_TAIL_LINES) for c in self._components.values())

    def stop(self) -> None:
        """Stop the kubelets, then every component, newest first: SIGTERM, then SIGKILL."""
        for node in self.nodes.values():
            node.stop(self.grace_s)
        self.nodes.clear()
        while self._components:
            self._components.pop(next(reversed(self._components))).stop(self.grace_s)

    def pids(self) -> dict[str, int]:
        """Return the process ID of each component still running, by its name."""
        return {
            name: c.process.pid for name, c in self._components.items() if c.process and c.running()
        }


def _probe(pki: Pki | None, port: int, path: str, expect: str) -> tuple[bool, str]:
    """GET ``path`` on 127.0.0.1 (HTTPS with the admin certificate when ``pki`` is given).

    Return whether the answer is 200 and contains ``expect``, and a short description of it.
    """
    connection: http.client.HTTPConnection
    if pki is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=_PROBE_TIMEOUT_S)
    else:
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        connection = http.client.HTTPSConnection(
            "127.0.0.1", port, context=context, timeout=_PROBE_TIMEOUT_S
        )
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read(2048).decode(errors="replace")
    except (OSError, http.client.HTTPException) as error:
        return False, f"{type(error).__name__}: {error}"
    finally:
        connection.close()
    summary = " ".join(body.split())[:300]
    return response.status == _HTTP_OK and expect in body, f"HTTP {response.status}: {summary}"
