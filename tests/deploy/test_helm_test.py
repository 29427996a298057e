"""`helm test`: the chart's test pod fails unless a controller and a kubelet plugin are ready."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.chartkit import render


def _script_and_urls(helm: Path) -> tuple[str, list[str]]:
    """Return the test pod's Python program and the two readiness URLs it is given."""
    (pod,) = [p for p in render(helm).of_kind("Pod") if p["metadata"]["name"].endswith("-ready")]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    command = pod["spec"]["containers"][0]["command"]
    assert command[:2] == ["python", "-c"]
    return command[2], command[3:]


@contextmanager
def _server(status: int) -> Iterator[str]:
    """Serve ``status`` and a verbose-readyz-like body on a local port; yield its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"[+]informers ok\n" if status == 200 else b"[-]slices failed: no cards\n"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            """Keep the test output clean."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/readyz?verbose"
    finally:
        server.shutdown()
        server.server_close()


def _run(script: str, *urls: str) -> subprocess.CompletedProcess[str]:
    """Run the test pod's program as the image would, with ``urls``."""
    return subprocess.run(
        [sys.executable, "-c", script, *urls],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_test_pod_asks_both_components_through_their_metrics_services(helm: Path) -> None:
    """The URLs are the controller's and the plugins' metrics Services, /readyz?verbose."""
    _, urls = _script_and_urls(helm)
    assert urls == [
        "http://gpushare-controller-metrics.gpushare.svc:8080/readyz?verbose",
        "http://gpushare-kubelet-plugin-metrics.gpushare.svc:8080/readyz?verbose",
    ]


def test_the_test_passes_when_both_are_ready_and_fails_saying_which_is_not(helm: Path) -> None:
    """Both 200: exit 0. One 503: exit 1, naming that URL and printing what it said."""
    script, _ = _script_and_urls(helm)
    with _server(200) as ready, _server(503) as not_ready:
        passed = _run(script, ready, ready)
        failed = _run(script, ready, not_ready)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert failed.returncode == 1
    assert f"{not_ready}\nNOT READY:" in failed.stdout
    assert "[-]slices failed: no cards" in failed.stdout
