"""Logging: one JSON object per line in the cluster, bound context on every event."""

from __future__ import annotations

import io
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from dra_driver.k8s.reconcile import ReconcileLoop
from dra_driver.logging import (
    LogFormat,
    bind,
    bound,
    carry,
    configure_logging,
    get_logger,
    pool_initializer,
)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def events(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_event_carries_bound_component_and_request_context() -> None:
    """A JSON event has level, timestamp, logger and every bound key (node, driver, claim)."""
    stream = io.StringIO()
    configure_logging(level="info", fmt=LogFormat.JSON, stream=stream)
    bind(component="kubelet-plugin", node="node-a", driver="gpushare.dra.dev")
    with bound(claim_uid="uid-1"):
        get_logger("dra_driver.test").info("prepare.start", devices=2)
    (event,) = events(stream)
    assert event["event"] == "prepare.start"
    assert event["level"] == "info"
    assert event["logger"] == "dra_driver.test"
    assert (event["node"], event["driver"], event["claim_uid"]) == (
        "node-a",
        "gpushare.dra.dev",
        "uid-1",
    )
    assert event["devices"] == 2
    assert str(event["timestamp"]).endswith("Z")


def test_request_context_is_dropped_after_the_block() -> None:
    """A claim UID bound for one request does not leak into the next event."""
    stream = io.StringIO()
    configure_logging(fmt=LogFormat.JSON, stream=stream)
    with bound(claim_uid="uid-1"), bound(claim_uid="uid-2"):
        get_logger("t").info("inner")
    get_logger("t").info("after")
    inner, after = events(stream)
    assert inner["claim_uid"] == "uid-2"
    assert "claim_uid" not in after


def test_events_below_the_level_are_dropped() -> None:
    """At level warning, info events are not written and warnings are."""
    stream = io.StringIO()
    configure_logging(level="warning", fmt=LogFormat.JSON, stream=stream)
    get_logger("t").info("quiet")
    get_logger("t").warning("loud")
    assert [e["event"] for e in events(stream)] == ["loud"]


def test_lease_renewals_of_the_client_library_stay_out_of_info_logs() -> None:
    """The client's leader election says "acquired lease" per renewal: kept below info."""
    stream = io.StringIO()
    configure_logging(level="info", fmt=LogFormat.JSON, stream=stream)
    logging.getLogger("leaderelection").info("leader x has successfully acquired lease")
    logging.getLogger("leaderelection").warning("failed to renew")
    assert [e["event"] for e in events(stream)] == ["failed to renew"]


def test_standard_library_records_use_the_same_json_format() -> None:
    """Libraries logging through stdlib logging come out as the same JSON with context."""
    stream = io.StringIO()
    configure_logging(fmt=LogFormat.JSON, stream=stream)
    bind(node="node-b")
    logging.getLogger("grpc._server").error("servicer failed: %s", "boom")
    (event,) = events(stream)
    assert event["event"] == "servicer failed: boom"
    assert (event["logger"], event["level"], event["node"]) == ("grpc._server", "error", "node-b")


def test_exceptions_are_structured_not_multiline() -> None:
    """An exception is rendered as structured frames inside the one JSON line."""
    stream = io.StringIO()
    configure_logging(fmt=LogFormat.JSON, stream=stream)
    try:
        raise RuntimeError("nvml lost the card")
    except RuntimeError:
        get_logger("t").exception("inventory.failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    (event,) = events(stream)
    exception = event["exception"]
    assert isinstance(exception, list)
    assert exception[0]["exc_type"] == "RuntimeError"
    assert exception[0]["exc_value"] == "nvml lost the card"


@pytest.mark.parametrize(
    ("stream_class", "expect_json"), [(io.StringIO, True), (_Tty, False)], ids=["pipe", "tty"]
)
def test_auto_format_is_json_except_on_a_terminal(
    stream_class: type[io.StringIO], expect_json: bool
) -> None:
    """Auto renders JSON into a pipe (a Pod's log) and readable text on a terminal."""
    stream = stream_class()
    configure_logging(fmt=LogFormat.AUTO, stream=stream)
    get_logger("t").info("hello", claim="c1")
    line = stream.getvalue().strip()
    if expect_json:
        assert json.loads(line)["event"] == "hello"
    else:
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)
        assert "hello" in line
        assert "claim" in line


def test_unknown_level_is_refused_with_allowed_values() -> None:
    """A bad level fails with a message naming the value and the allowed levels."""
    with pytest.raises(
        ValueError,
        match="log level 'verbose' is not supported; allowed values: debug, info, warning, error",
    ):
        configure_logging(level="verbose")


def log_an_exception_with_a_secret_local(fmt: LogFormat) -> tuple[str, str]:
    """Log an exception raised beside a local secret; return the output and the secret."""
    stream = io.StringIO()
    configure_logging(level="info", fmt=fmt, stream=stream)
    secret = "hunter2-s3cret"
    try:
        raise ValueError(f"boom {len(secret)}")
    except ValueError:
        get_logger("t").exception("failed")
    return stream.getvalue(), secret


def test_json_tracebacks_never_carry_local_variables() -> None:
    """An exception logged as JSON shows its frames but no locals, which may hold secrets."""
    output, secret = log_an_exception_with_a_secret_local(LogFormat.JSON)
    event = json.loads(output.splitlines()[-1])
    assert event["exception"][0]["exc_type"] == "ValueError"
    assert event["exception"][0]["frames"]
    assert secret not in output


def test_console_tracebacks_never_carry_local_variables() -> None:
    """An exception logged for a terminal shows its traceback but no locals (rich would)."""
    output, secret = log_an_exception_with_a_secret_local(LogFormat.CONSOLE)
    assert "Traceback" in output
    assert "ValueError: boom 14" in output
    assert secret not in output


def _events(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_worker_threads_log_with_the_process_identity() -> None:
    """A reconcile worker and a pool thread carry the component and node bound at start-up."""
    stream = io.StringIO()
    configure_logging(fmt=LogFormat.JSON, stream=stream)
    bind(component="kubelet-plugin", node="node-7")
    done = threading.Event()

    def reconcile(key: str) -> None:
        get_logger("test").info("worker.event", key=key)
        done.set()

    loop: ReconcileLoop[str] = ReconcileLoop("identity", reconcile)
    loop.start()
    try:
        loop.queue.add("k")
        assert done.wait(10)
    finally:
        loop.stop()
    with ThreadPoolExecutor(1, initializer=pool_initializer()) as pool:
        pool.submit(lambda: get_logger("test").info("pool.event")).result(10)
    by_event = {e["event"]: e for e in _events(stream)}
    for name in ("worker.event", "pool.event"):
        assert (by_event[name]["component"], by_event[name]["node"]) == ("kubelet-plugin", "node-7")


def test_a_thread_started_bare_logs_without_it() -> None:
    """Without carry() a new thread has none of the identity: what carry() exists to fix."""
    stream = io.StringIO()
    configure_logging(fmt=LogFormat.JSON, stream=stream)
    bind(component="controller")
    bare = threading.Thread(target=lambda: get_logger("t").info("bare.event"))
    carried = threading.Thread(target=carry(lambda: get_logger("t").info("carried.event")))
    for thread in (bare, carried):
        thread.start()
        thread.join(10)
    by_event = {e["event"]: e for e in _events(stream)}
    assert "component" not in by_event["bare.event"]
    assert by_event["carried.event"]["component"] == "controller"
