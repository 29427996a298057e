"""``gpushare-dra status`` and nominations: the room held for an online pod, and its victims."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpushare_simulator.harness.apiserver import FakeApiServer
from ops.builders import NAMES, claim, pod, seed_cards, share

from dra_driver.cli.main import main
from dra_driver.engine.nomination import Nomination, PodRef
from dra_driver.ops.status import cluster_status, render

FUTURE = "2999-01-01T00:00:00Z"
PAST = "2001-01-01T00:00:00Z"
OFFLINE_SHARE = "7d3f1c2a-0000-4000-8000-000000000002"
HELD_SHARE = "7d3f1c2a-0000-4000-8000-000000000003"


def _nomination(victims: tuple[PodRef, ...], expires: str = FUTURE) -> str:
    """Return the annotation the controller writes: 60 cores, 8Gi of node-2/gpu-0 for online."""
    held = share("gpu-0", "60", "8Gi", HELD_SHARE)
    online = PodRef("default", "online", "00000000-0000-4000-8000-0000000000aa")
    return Nomination(online, "node-2", expires, victims, (held,)).encode()


def _nominated_claim(name: str, annotation: str) -> dict[str, Any]:
    body = claim(name)
    body["metadata"]["annotations"] = {NAMES.nomination_annotation: annotation}
    return body


def _running(server: FakeApiServer, name: str, *, finalizers: tuple[str, ...] = ()) -> PodRef:
    """Create a pod bound to node-2 and return it as a nomination names it."""
    body = pod(name)
    body["spec"]["nodeName"] = "node-2"
    body["metadata"]["finalizers"] = list(finalizers)
    created = server.create(body)
    return PodRef("default", name, created["metadata"]["uid"])


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """Serve an offline share on node-2/gpu-0 and a waiting online pod whose claim is nominated.

    Victims: ``pb`` runs, ``pt`` is being deleted, ``pg`` is gone.
    """
    with FakeApiServer() as running:
        seed_cards(running)
        running.create(claim("b"))
        current = running.get("resourceclaims", "default", "b")
        assert current is not None
        allocated = claim("b", results=[share("gpu-0", "40", "2Gi", OFFLINE_SHARE)], pods=("pb",))
        running.update_status({**current, "status": allocated["status"]})
        pb = _running(running, "pb")
        pt = _running(running, "pt", finalizers=("example.com/hold",))
        running.delete("pods", "default", "pt", {"gracePeriodSeconds": 0})
        pg = PodRef("default", "pg", "00000000-0000-4000-8000-0000000000ff")
        running.create(_nominated_claim("online-gpu", _nomination((pb, pt, pg))))
        running.create(pod("online", gates=(NAMES.scheduling_gate,), claim_name="online-gpu"))
        yield running
        assert running.internal_errors == []


def _status(server: FakeApiServer, tmp_path: Path, *output: str) -> int:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    return main(["status", "--kubeconfig", str(kubeconfig), *output], environ={})


def test_json_lists_the_nomination_with_its_cards_victims_and_expiry(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One entry: pod, claim, node, the held 60 cores/8Gi, each victim's state, not expired."""
    assert _status(server, tmp_path, "-o", "json") == 0
    view = json.loads(capsys.readouterr().out)
    assert view["nominations"] == [
        {
            "claim": "default/online-gpu",
            "pod": "default/online",
            "node": "node-2",
            "devices": [{"pool": "node-2", "device": "gpu-0", "cores": "60", "memory": "8Gi"}],
            "victims": [
                {"pod": "default/pb", "state": "running"},
                {"pod": "default/pt", "state": "terminating"},
                {"pod": "default/pg", "state": "gone"},
            ],
            "expires": FUTURE,
            "expired": False,
        }
    ]
    assert view["nominationProblems"] == []


def test_the_table_has_a_nomination_row_and_reads_each_victim(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The row names the pod, node, card and victims with states; victims are read by get."""
    server.reset_requests()
    assert _status(server, tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("NOMINATED POD"))
    assert re.split(r"  +", header) == [
        "NOMINATED POD", "CLAIM", "NODE", "HOLDS", "EVICTING", "EXPIRES",
    ]  # fmt: skip
    (row,) = [line for line in lines if line.startswith("default/online ") and "node-2" in line]
    assert re.split(r"  +", row) == [
        "default/online",
        "default/online-gpu",
        "node-2",
        "node-2/gpu-0 (60 cores, 8Gi)",
        "default/pb (running), default/pt (terminating), default/pg (gone)",
        FUTURE,
    ]
    assert server.requests[("get", "pods")] == 3
    assert {verb for verb, _ in server.requests} == {"list", "get"}


def test_an_expired_nomination_says_so(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hold whose expiry has passed is marked expired, in the table and in JSON."""
    current = server.get("resourceclaims", "default", "online-gpu")
    assert current is not None
    current["metadata"]["annotations"][NAMES.nomination_annotation] = _nomination((), PAST)
    server.update(current)
    assert _status(server, tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [line for line in lines if line.startswith("default/online ") and "node-2" in line]
    assert re.split(r"  +", row)[-2:] == ["-", f"{PAST} (expired)"]
    assert _status(server, tmp_path, "-o", "json") == 0
    (nomination,) = json.loads(capsys.readouterr().out)["nominations"]
    assert (nomination["expired"], nomination["victims"]) == (True, [])


def test_a_malformed_annotation_is_a_problem_line_naming_the_claim(
    server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An annotation that is not a nomination is named with the codec's message; status runs."""
    server.create(_nominated_claim("broken", '{"node": "node-2"}'))
    assert _status(server, tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("nominations the driver cannot read (ignored, they hold no room):")
    problem = "claim default/broken: expires: not a non-empty string"
    assert lines[at + 1] == f"  {problem}"
    assert _status(server, tmp_path, "-o", "json") == 0
    view = json.loads(capsys.readouterr().out)
    assert view["nominationProblems"] == [problem]
    assert [n["claim"] for n in view["nominations"]] == ["default/online-gpu"]


def test_an_allocated_claims_leftover_annotation_is_not_shown() -> None:
    """Once the claim is allocated its nomination holds nothing: no row, no problem."""
    allocated = claim("online-gpu", results=[share("gpu-0", "60", "8Gi", HELD_SHARE)])
    allocated["metadata"]["annotations"] = {NAMES.nomination_annotation: "not json"}
    view = cluster_status(NAMES, slices=[], claims=[allocated], pods=[], events=[], now=0.0)
    assert (view.nominations, view.nomination_problems) == ([], [])


def test_victims_that_cannot_be_read_are_unknown_and_the_clock_decides_expiry() -> None:
    """victims_read false: every victim is unknown; expired compares the injected now."""
    victim = PodRef("default", "pb", "uid-pb")
    nominated = _nominated_claim("online-gpu", _nomination((victim,), PAST))
    before = cluster_status(
        NAMES, slices=[], claims=[nominated], pods=[], events=[], now=0.0, victims_read=False
    )
    (seen,) = before.nominations
    assert (seen.victims, seen.expired) == ((("default/pb", "unknown"),), False)
    after = cluster_status(NAMES, slices=[], claims=[nominated], pods=[], events=[], now=2e9)
    assert after.nominations[0].expired is True
    assert after.nominations[0].victims == (("default/pb", "gone"),)


def test_without_nominations_the_output_has_no_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No nominated claim: the table has no nomination lines and the JSON lists are empty."""
    with FakeApiServer() as server:
        seed_cards(server)
        server.create(claim("plain"))
        assert _status(server, tmp_path) == 0
        text = capsys.readouterr().out
        assert _status(server, tmp_path, "-o", "json") == 0
        view = json.loads(capsys.readouterr().out)
    assert "NOMINATED" not in text
    assert "nominations" not in text
    assert (view["nominations"], view["nominationProblems"]) == ([], [])
    empty = cluster_status(NAMES, slices=[], claims=[], pods=[], events=[], now=0.0)
    assert render(empty, "table").splitlines()[-1] == "no pod waits for a card"
