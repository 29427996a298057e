"""Real-binaries mode of the test harness: a real Kubernetes control plane on 127.0.0.1.

When ``GPUSHARE_E2E_BIN_DIR`` names a directory holding ``etcd``, ``kube-apiserver``,
``kube-controller-manager`` and ``kube-scheduler`` of one Kubernetes release (1.34 or newer),
:class:`RealControlPlane` starts them on random free loopback ports with a throwaway PKI made by
the ``openssl`` CLI, every DRA feature gate the driver uses (per release, see
:func:`feature_gates`), and an admin kubeconfig; it stops them all on exit (SIGTERM, then
SIGKILL after a grace period). There is no kubelet: the harness emulates it, and creates Node
objects through the API. See tests/README.md, "Real-binaries mode".

CI never runs this mode; neither can the development sandbox, since the binaries are in no
package registry. What runs everywhere are the unit tests of the pure parts and of the process
handling against stand-in binaries.

Usage::

    with RealControlPlane(bin_dir, tmp_path) as plane:
        api = plane.api_client()
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Final, TypeAlias

from kubernetes import client, config

from dra_driver.k8s.client import TimedApiClient, bounded_retries
from dra_driver.k8s.settings import ApiTimeouts
from gpushare_simulator.harness._controlplane_setup import (
    MIN_VERSION,
    NEWEST_KNOWN_VERSION,
    ControlPlaneError,
    Layout,
    Pki,
    component_commands,
    feature_gates,
    gates_flag,
    generate_pki,
    kubeconfig_yaml,
    parse_kube_version,
)
from gpushare_simulator.harness.spawn import spawn

__all__ = [
    "BINARIES",
    "E2E_BIN_DIR_ENV",
    "MIN_VERSION",
    "NEWEST_KNOWN_VERSION",
    "ControlPlaneError",
    "Layout",
    "Pki",
    "RealControlPlane",
    "component_commands",
    "detect_kube_version",
    "e2e_bin_dir",
    "feature_gates",
    "gates_flag",
    "generate_pki",
    "kubeconfig_yaml",
    "parse_kube_version",
    "validate_bin_dir",
]

E2E_BIN_DIR_ENV: Final = "GPUSHARE_E2E_BIN_DIR"
BINARIES: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
LOG_TAIL_LINES: Final = 25
_PROBE_TIMEOUT_S: Final = 5.0
_POLL_INTERVAL_S: Final = 0.25
_HTTP_OK: Final = 200
_Probe: TypeAlias = Callable[[], tuple[bool, str]]


def validate_bin_dir(path: Path) -> Path:
    """Return ``path`` if it holds the four binaries, executable; else ControlPlaneError."""
    wanted = ", ".join(BINARIES)
    if not path.is_dir():
        raise ControlPlaneError(
            f"{E2E_BIN_DIR_ENV}={path}: not a directory; it must hold {wanted} of one "
            "Kubernetes release >= 1.34 (see tests/README.md)"
        )
    missing = [name for name in BINARIES if not (path / name).is_file()]
    idle = [n for n in BINARIES if n not in missing and not os.access(path / n, os.X_OK)]
    if missing or idle:
        problems = [f"missing: {', '.join(missing)}"] if missing else []
        problems += [f"not executable: {', '.join(idle)} (chmod +x)"] if idle else []
        raise ControlPlaneError(
            f"{E2E_BIN_DIR_ENV}={path}: {'; '.join(problems)}; it must hold {wanted} of one "
            "Kubernetes release >= 1.34 (see tests/README.md)"
        )
    return path


def e2e_bin_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """Return the validated ``GPUSHARE_E2E_BIN_DIR``, or None when it is unset or empty.

    A set but unusable directory raises :class:`ControlPlaneError`: whoever set it meant to run
    the real-binaries tests, and a silent skip would hide that they did not.
    """
    value = (os.environ if environ is None else environ).get(E2E_BIN_DIR_ENV, "")
    return validate_bin_dir(Path(value).expanduser()) if value else None


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


class _Component:
    """One started binary with its log file."""

    def __init__(self, name: str, command: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        try:
            self.process = spawn(command, stdout=self._log)
        except OSError:
            self._log.close()
            raise

    def stop(self, grace_s: float) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError as error:
            text = [f"(cannot read: {error})"]
        return f"--- {self.name} ({self.log_path}, last {lines} lines) ---\n" + "\n".join(text)


class RealControlPlane:
    """A real etcd, kube-apiserver, kube-controller-manager and kube-scheduler; a context manager.

    ``bin_dir`` holds the binaries (checked by :func:`validate_bin_dir`), ``work_dir`` receives
    the PKI, etcd's data, the kubeconfig and one log per component (``logs/<name>.log``).
    ``kube_version_hint`` (``"1.36"``) replaces asking ``kube-apiserver --version``, for builds
    that report no usable version. ``timeout_s`` bounds the whole start-up; ``grace_s`` is how
    long each component may take to exit on SIGTERM before it is killed.
    """

    def __init__(
        self,
        bin_dir: Path,
        work_dir: Path,
        kube_version_hint: str | None = None,
        *,
        timeout_s: float = 120.0,
        grace_s: float = 10.0,
    ) -> None:
        self.bin_dir = validate_bin_dir(bin_dir)
        self.work_dir = work_dir
        self.kube_version_hint = kube_version_hint
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.version: tuple[int, int] | None = None
        self._layout: Layout | None = None
        self._components: list[_Component] = []

    def __enter__(self) -> RealControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

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

    def api_client(self) -> TimedApiClient:
        """Return a new API client authenticated as the admin, bounded as components' are."""
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        bounded_retries(configuration)
        return TimedApiClient(configuration, ApiTimeouts())

    def start(self) -> None:
        """Start every component and wait until all are ready; on any failure stop them all."""
        deadline = time.monotonic() + self.timeout_s
        try:
            self._start(deadline)
        except BaseException:
            self.stop()
            raise

    def _start(self, deadline: float) -> None:
        hint = self.kube_version_hint
        self.version = (
            parse_kube_version(hint)
            if hint
            else detect_kube_version(self.bin_dir / "kube-apiserver")
        )
        if self.version == (0, 0):
            raise ControlPlaneError(
                "kube-apiserver --version reports v0.0.0 (a development build?); pass "
                "kube_version_hint with the release it was built from, e.g. '1.36'"
            )
        gates = feature_gates(self.version)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "logs").mkdir(exist_ok=True)
        layout = Layout(self.work_dir, *free_ports(5))
        self._layout = layout
        pki = generate_pki(layout.pki.ca_cert.parent)
        layout.kubeconfig.write_text(kubeconfig_yaml(layout.url, pki))
        commands = component_commands(self.bin_dir, layout, gates)
        probes = {
            "etcd": lambda: _probe(None, layout.etcd_client_port, "/health", '"health":"true"'),
            "kube-apiserver": lambda: _probe(pki, layout.apiserver_port, "/readyz", "ok"),
            "kube-controller-manager": lambda: _probe(
                pki, layout.controller_manager_port, "/healthz", "ok"
            ),
            "kube-scheduler": lambda: _probe(pki, layout.scheduler_port, "/healthz", "ok"),
        }
        for name, command in commands.items():
            log = self.work_dir / "logs" / f"{name}.log"
            self._components.append(_Component(name, command, log))
            if name in ("etcd", "kube-apiserver"):  # later components need these to be up
                self._wait(name, probes[name], deadline)
        for name in ("kube-controller-manager", "kube-scheduler"):
            self._wait(name, probes[name], deadline)
        # Pods need the default ServiceAccount, which the controller manager creates.
        sa_path = "/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(
            "default ServiceAccount",
            lambda: _probe(pki, layout.apiserver_port, sa_path, ""),
            deadline,
        )

    def _wait(self, what: str, probe: _Probe, deadline: float) -> None:
        last = "no answer yet"
        while True:
            for component in self._components:
                code = component.process.poll()
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
        return "\n".join(component.tail() for component in self._components)

    def stop(self) -> None:
        """Stop every component, newest first: SIGTERM, then SIGKILL after ``grace_s``."""
        while self._components:
            self._components.pop().stop(self.grace_s)

    def pids(self) -> list[int]:
        """Return the process IDs of the components still running (for tests and debugging)."""
        return [c.process.pid for c in self._components if c.process.poll() is None]


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
