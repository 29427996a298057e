"""Run the fake API server as a process: ``python -m gpushare_simulator.harness.apiserver``.

Prints the URL on the first line of stdout, writes the kubeconfig, serves until SIGTERM or
SIGINT, then stops cleanly and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from gpushare_simulator.harness.apiserver.fake import FakeApiServer
from gpushare_simulator.harness.apiserver.schemas import SUPPORTED_VERSIONS


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m gpushare_simulator.harness.apiserver",
        description="In-process fake Kubernetes API server (plain HTTP, any token accepted).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: pick a free one)")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the server to this path")
    parser.add_argument(
        "--kube-version",
        default="1.36",
        choices=SUPPORTED_VERSIONS,
        help="Kubernetes release to emulate (schemas and /version)",
    )
    parser.add_argument("--watch-history", type=int, default=1000, help="events kept per resource")
    parser.add_argument("--no-validate", action="store_true", help="skip schema/semantic checks")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; return the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = FakeApiServer(
        args.kube_version,
        validate=not args.no_validate,
        watch_history=args.watch_history,
        host=args.host,
        port=args.port,
    )
    with server:
        if args.kubeconfig:
            server.write_kubeconfig(args.kubeconfig)
        sys.stdout.write(server.url + "\n")
        sys.stdout.flush()
        while not done.wait(1.0):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
