"""The driver's components as real processes against the harness: start, watch, kill, restart.

In-process components cannot be SIGKILLed, and their memory cannot be told apart from the test
runner's. Fault-injection tests, benchmarks and load runs start ``gpushare-dra kubelet-plugin``
and ``gpushare-dra controller`` here instead: each writes JSON logs to its own file, which is
also how readiness is detected (a predecessor killed by SIGKILL leaves its socket behind, so a
socket is no proof of life).

No process outlives the one that started it (see :mod:`gpushare_simulator.harness.spawn`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.k8s.signals import STACKS_SIGNAL
from gpushare_simulator.harness.cluster import FakeCluster
from gpushare_simulator.harness.spawn import spawn

_STOP_SECONDS: Final = 20.0
_STACKS_SECONDS: Final = 3.0
_PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE")


class ProcessExited(Exception):  # noqa: N818 - names the event a caller waits for
    """The component exited while something waited for it; the message ends with its log."""


class ComponentProcess:
    """One ``gpushare-dra <subcommand>`` process with its log file."""

    def __init__(
        self,
        argv: Sequence[str],
        log: Path,
        *,
        ready_event: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log = log
        self.ready_event = ready_event
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self._log_offset = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.process = spawn(self.argv, stdout=out, env=self._env)

    @property
    def pid(self) -> int:
        """The process ID."""
        return self.process.pid

    def output(self) -> str:
        """Return what this process (not an earlier one sharing the log) has written."""
        with self.log.open() as text:
            text.seek(self._log_offset)
            return text.read()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for the component's start-up log event; raise if it exits or times out first."""
        deadline = time.monotonic() + timeout
        marker = f'"{self.ready_event}"'
        while marker not in self.output():
            if self.process.poll() is not None:
                raise ProcessExited(
                    f"{self.argv[3]} exited with {self.process.returncode}:\n{self.output()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.argv[3]} not ready in {timeout} s:\n{self.output()}")
            time.sleep(0.05)

    def stacks(self, wait: float = _STACKS_SECONDS) -> str:
        """Ask the live process for every thread's stack (SIGUSR1); return what it wrote.

        ``""`` when the process has exited. For a report of where a stuck component is.
        """
        if self.process.poll() is not None:
            return ""
        before = len(self.output())
        self.process.send_signal(STACKS_SIGNAL)
        deadline = time.monotonic() + wait
        written = ""
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = self.output()[before:]
            # One "(most recent call first)" block per thread, in a few writes: done when
            # the dump has begun and stopped growing.
            if now == written and "most recent call first" in now:
                break
            written = now
        return written

    def rss_bytes(self) -> int:
        """Return the resident set size now (from ``/proc``, so Linux only)."""
        fields = Path(f"/proc/{self.pid}/statm").read_text().split()
        return int(fields[1]) * _PAGE_SIZE

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed or cleaned up."""
        self.process.kill()
        self.process.wait(_STOP_SECONDS)

    def terminate(self) -> int:
        """SIGTERM, then wait for a graceful exit; return the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(_STOP_SECONDS)

    def restart(self) -> ComponentProcess:
        """Start the same command again, appending to the same log."""
        return ComponentProcess(self.argv, self.log, ready_event=self.ready_event, env=self._env)


def _gpushare(subcommand: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "dra_driver", subcommand, *args, "--log-format", "json"]


def _component(cluster: FakeCluster, subcommand: str, driver: str, *args: str) -> list[str]:
    """Return the command line of a component of ``driver`` against ``cluster``, no metrics."""
    return _gpushare(
        subcommand,
        "--driver-name", driver,
        "--kubeconfig", str(cluster.kubeconfig()),
        "--metrics-port", "-1",
        *args,
    )  # fmt: skip


def _log_path(cluster: FakeCluster, stem: str) -> Path:
    return cluster.work_dir / f"{stem}-{uuid.uuid4().hex[:8]}.log"


def start_plugin(
    cluster: FakeCluster,
    node: str,
    inventory: Path,
    *,
    names: DriverNames | None = None,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> ComponentProcess:
    """Start the kubelet plugin of ``node``, serving in the node's directories of ``cluster``."""
    driver = names.driver if names else DEFAULT_DRIVER_NAME
    dirs = cluster.node_dirs(node)
    argv = _component(
        cluster,
        "kubelet-plugin",
        driver,
        "--node-name", node,
        "--gpu-inventory", str(inventory),
        "--plugin-registry-dir", str(dirs.registry),
        "--plugin-dir", str(dirs.plugins / driver),
        "--cdi-root", str(dirs.cdi),
        *args,
    )  # fmt: skip
    return ComponentProcess(
        argv, _log_path(cluster, f"plugin-{node}"), ready_event="plugin.started", env=env
    )


def start_controller(
    cluster: FakeCluster,
    *,
    names: DriverNames | None = None,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> ComponentProcess:
    """Start the allocation controller against ``cluster`` (add ``--no-leader-elect`` etc.)."""
    driver = names.driver if names else DEFAULT_DRIVER_NAME
    argv = _component(cluster, "controller", driver, *args)
    return ComponentProcess(
        argv, _log_path(cluster, "controller"), ready_event="controller.started", env=env
    )


def start_webhook(
    cluster: FakeCluster,
    *,
    cert_file: Path,
    key_file: Path,
    names: DriverNames | None = None,
    args: Sequence[str] = (),
) -> ComponentProcess:
    """Start the admission webhook on a free port; :func:`logged_port` says which."""
    driver = names.driver if names else DEFAULT_DRIVER_NAME
    argv = _component(
        cluster,
        "webhook",
        driver,
        "--webhook-port", "0",
        "--tls-cert-file", str(cert_file),
        "--tls-key-file", str(key_file),
        *args,
    )  # fmt: skip
    return ComponentProcess(argv, _log_path(cluster, "webhook"), ready_event="webhook.started")


def logged_port(process: ComponentProcess, event: str) -> int:
    """Return the ``port`` of the first JSON log line of ``event`` the process wrote."""
    for line in process.output().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event and "port" in entry:
            return int(entry["port"])
    raise LookupError(f"no {event} line with a port in the log of {process.argv[3]}")
