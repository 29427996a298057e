"""A run that is killed or interrupted leaves none of the processes it started behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "GPUSHARE_TEST_RUN"


def marked(run: str) -> list[int]:
    """Return the PIDs of live driver processes whose environment carries this run's marker."""
    needle = f"{MARKER}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if needle in environ.split(b"\0") and b"dra_driver" in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def wait(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.parametrize(
    "how",
    [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
    ids=["killed", "terminated", "interrupted"],
)
def test_a_load_run_stopped_midway_leaves_no_process(how: signal.Signals) -> None:
    """Whatever ends hack/load.py, its controller and plugin processes end with it."""
    run = uuid.uuid4().hex
    # A killed run cannot remove its directory: it goes under one the test removes.
    root = Path(tempfile.mkdtemp(prefix="o", dir="/tmp"))
    script = subprocess.Popen(
        [
            sys.executable, str(ROOT / "hack/load.py"),
            "--waves", "1", "--pods", "4", "--nodes", "2", "--real-plugins", "2",
            "--timeout", "60", "--work-root", str(root),
        ],
        env={**os.environ, MARKER: run},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # The controller and both plugin processes are up: the run is in full swing.
        wait(lambda: len(marked(run)) >= 3 or script.poll() is not None, 60)
        assert script.poll() is None, "the run ended before it could be stopped"
        script.send_signal(how)
        script.wait(60)
        wait(lambda: not marked(run), 20)
    finally:
        script.kill()
        script.wait()
        for pid in marked(run):  # leave nothing behind even when the test fails
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
