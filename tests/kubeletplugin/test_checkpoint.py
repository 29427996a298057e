"""The kubelet plugin's checkpoint file: round trip, checksum, corruption handling, mode."""

from __future__ import annotations

import hashlib
import json
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from dra_driver.kubeletplugin.checkpoint import (
    Checkpoint,
    ClaimEntry,
    ClaimState,
    CorruptCheckpointError,
    PreparedDevice,
)

UID_A = "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0"
UID_B = "1a2b3c4d-5e6f-4a0b-8c1d-2e3f4a5b6c7d"
UID_C = "9e8d7c6b-5a49-4837-a261-504f3e2d1c0b"
SHARE = "11111111-2222-4333-8444-555555555555"
ASIDE = re.compile(r"checkpoint\.json\.corrupt-\d{8}T\d{6}\.\d{6}Z")


def started(uid: str, name: str = "c") -> ClaimEntry:
    return ClaimEntry(
        uid, "default", name, ClaimState.PREPARE_STARTED, f"k8s.x.dev-claim_{uid}.json"
    )


def completed(uid: str, name: str = "c") -> ClaimEntry:
    devices = (
        PreparedDevice(
            ("gpu",), "node-a", "gpu-0", (f"k8s.x.dev/claim={uid}-gpu-0-{SHARE}",), SHARE
        ),
        PreparedDevice(
            ("whole", "other"), "node-a", "gpu-1", (f"k8s.x.dev/claim={uid}-gpu-1",), None
        ),
    )
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "k8s.x.dev/claim",
        "devices": [{"name": f"{uid}-gpu-0", "containerEdits": {"env": ["A=1"]}}],
        "containerEdits": {"env": ["Z=2", "B=3"], "mounts": []},
    }
    return ClaimEntry(
        uid,
        "team-a",
        name,
        ClaimState.PREPARE_COMPLETED,
        f"k8s.x.dev-claim_{uid}.json",
        devices=devices,
        spec=spec,
    )


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint.json"


@pytest.fixture
def saved(path: Path) -> bytes:
    """Write a checkpoint with one started and one completed claim; return its bytes."""
    checkpoint = Checkpoint(path)
    checkpoint.put(started(UID_A, "first"))
    checkpoint.put(completed(UID_B, "second"))
    return path.read_bytes()


def test_put_and_remove_persist_and_reload_identically(path: Path) -> None:
    """Entries put, replaced and removed read back from a fresh Checkpoint exactly as kept."""
    checkpoint = Checkpoint(path)
    checkpoint.put(started(UID_A))
    checkpoint.put(completed(UID_B))
    checkpoint.put(started(UID_C))
    checkpoint.put(completed(UID_A))  # replaces the started entry of the same claim
    checkpoint.remove(UID_C)
    reloaded = Checkpoint(path)
    reloaded.load()
    assert reloaded.claims == {UID_A: completed(UID_A), UID_B: completed(UID_B)}
    assert reloaded.claims == checkpoint.claims
    entry = reloaded.claims[UID_B]
    assert entry.state is ClaimState.PREPARE_COMPLETED
    assert isinstance(entry.devices[1].request_names, tuple)
    assert entry.devices[1].share_id is None
    assert entry.devices[0].share_id == SHARE


def test_removing_the_last_claim_persists_an_empty_checkpoint(path: Path) -> None:
    """After the only claim is removed, a reload finds no claims (the removal was written)."""
    checkpoint = Checkpoint(path)
    checkpoint.put(completed(UID_A))
    checkpoint.remove(UID_A)
    reloaded = Checkpoint(path)
    reloaded.load()
    assert reloaded.claims == {}
    assert json.loads(path.read_bytes())["claims"] == {}


def test_removing_an_unknown_claim_is_a_no_op(path: Path, saved: bytes) -> None:
    """remove() of a claim never put neither fails nor rewrites the file."""
    checkpoint = Checkpoint(path)
    checkpoint.load()
    before = path.stat().st_ino
    checkpoint.remove(UID_C)
    assert path.read_bytes() == saved
    assert path.stat().st_ino == before
    assert set(checkpoint.claims) == {UID_A, UID_B}


def test_file_carries_version_and_checksum_of_the_claims(path: Path, saved: bytes) -> None:
    """The file holds version 1 and the SHA-256 of the canonical JSON of its claims."""
    document = json.loads(saved)
    assert document["version"] == 1
    canonical = json.dumps(document["claims"], sort_keys=True, separators=(",", ":")).encode()
    assert document["checksum"] == hashlib.sha256(canonical).hexdigest()
    assert set(document["claims"]) == {UID_A, UID_B}
    assert document["claims"][UID_B]["state"] == "PrepareCompleted"
    assert document["claims"][UID_A]["state"] == "PrepareStarted"


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["put-started", "put-completed", "remove"]),
            st.lists(st.sampled_from([UID_A, UID_B, UID_C]), min_size=1, max_size=3),
        ),
        max_size=12,
    )
)
def test_every_save_writes_the_whole_document_as_canonical_json(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, list[str]]]
) -> None:
    """After any puts and removes the file is the canonical JSON a full rewrite would give."""
    path = tmp_path_factory.mktemp("checkpoint") / "checkpoint.json"
    checkpoint = Checkpoint(path)
    checkpoint.load()
    for action, uids in steps:
        if action == "remove":
            checkpoint.remove(*uids)
        else:
            checkpoint.put(*(started(u) if action == "put-started" else completed(u) for u in uids))
        if not path.exists():
            continue
        claims = {uid: entry.to_json() for uid, entry in checkpoint.claims.items()}
        canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
        document = {
            "checksum": hashlib.sha256(canonical.encode()).hexdigest(),
            "claims": claims,
            "version": 1,
        }
        expected = json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"
        assert path.read_bytes() == expected.encode()
        reloaded = Checkpoint(path)
        reloaded.load()
        assert reloaded.claims == checkpoint.claims


def test_file_mode_is_0600(path: Path, saved: bytes) -> None:
    """The checkpoint is readable and writable by its owner only, also after a rewrite."""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    checkpoint = Checkpoint(path)
    checkpoint.load()
    checkpoint.put(started(UID_C))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_missing_file_is_an_empty_checkpoint(path: Path) -> None:
    """load() of a missing file forgets what was in memory and creates no file."""
    checkpoint = Checkpoint(path)
    checkpoint.claims = {UID_A: started(UID_A)}
    checkpoint.load()
    assert checkpoint.claims == {}
    assert not path.exists()
    assert list(path.parent.iterdir()) == []


def _with_checksum(document: dict[str, object]) -> bytes:
    """Return ``document`` as the checkpoint would write it, with a checksum that matches."""
    canonical = json.dumps(document["claims"], sort_keys=True, separators=(",", ":")).encode()
    return json.dumps({**document, "checksum": hashlib.sha256(canonical).hexdigest()}).encode()


def _edit_claim_byte(data: bytes) -> bytes:
    """Change one byte inside a claim: the namespace "team-a" becomes "team-b"."""
    assert data.count(b'"team-a"') == 1
    return data.replace(b'"team-a"', b'"team-b"')


def _invalid_utf8_byte(data: bytes) -> bytes:
    """Overwrite one byte of a claim's name with a byte that is not UTF-8."""
    index = data.index(b'"second"') + 1
    return data[:index] + b"\xff" + data[index + 1 :]


def _bad_checksum(data: bytes) -> bytes:
    document = json.loads(data)
    document["checksum"] = "0" * 64
    return json.dumps(document).encode()


def _invalid_json(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _unknown_version(data: bytes) -> bytes:
    document = json.loads(data)
    return _with_checksum({**document, "version": 2})


def _no_claims_key(data: bytes) -> bytes:
    document = json.loads(data)
    del document["claims"]
    return json.dumps(document).encode()


def _unknown_state(data: bytes) -> bytes:
    document = json.loads(data)
    document["claims"][UID_A]["state"] = "PrepareHalfway"
    return _with_checksum(document)


def _not_an_object(data: bytes) -> bytes:
    return b"[1, 2, 3]\n"


def _empty(data: bytes) -> bytes:
    return b""


def _claims_not_a_mapping(data: bytes) -> bytes:
    document = json.loads(data)
    return _with_checksum({**document, "claims": list(document["claims"].values())})


TAMPERINGS: list[object] = [
    pytest.param(_edit_claim_byte, "checksum mismatch", id="one-byte-of-a-claim"),
    pytest.param(_invalid_utf8_byte, "", id="one-byte-not-utf8"),
    pytest.param(_bad_checksum, "checksum mismatch", id="checksum-mismatch"),
    pytest.param(_invalid_json, "", id="invalid-json"),
    pytest.param(_empty, "", id="empty-file"),
    pytest.param(_unknown_version, "unknown checkpoint version 2", id="unknown-version"),
    pytest.param(_no_claims_key, "claims", id="no-claims-key"),
    pytest.param(_unknown_state, "PrepareHalfway", id="unknown-state"),
    pytest.param(_not_an_object, "", id="not-an-object"),
    pytest.param(
        _claims_not_a_mapping,
        "",
        id="claims-a-list-with-valid-checksum",
    ),
]


@pytest.mark.parametrize(("tamper", "problem"), TAMPERINGS)
def test_tampered_file_is_moved_aside_and_reported(
    path: Path, saved: bytes, tamper: Callable[[bytes], bytes], problem: str
) -> None:
    """A corrupt file raises CorruptCheckpointError, moves aside intact, and logs an error."""
    tampered = tamper(saved)
    assert tampered != saved
    path.write_bytes(tampered)
    checkpoint = Checkpoint(path)
    checkpoint.claims = {UID_C: started(UID_C)}
    with capture_logs() as logs, pytest.raises(CorruptCheckpointError) as caught:
        checkpoint.load()
    assert not path.exists()
    (aside,) = list(path.parent.iterdir())
    assert ASIDE.fullmatch(aside.name), aside.name
    assert aside.read_bytes() == tampered
    assert checkpoint.claims == {}
    message = str(caught.value)
    assert message.startswith(f"checkpoint {path} is corrupt (")
    assert message.endswith(f"moved aside to {aside}")
    assert problem in message
    (event,) = [e for e in logs if e["event"] == "checkpoint.corrupt"]
    assert event["log_level"] == "error"
    assert event["path"] == str(path)
    assert event["moved_to"] == str(aside)
    assert problem in event["error"]


def test_after_a_corrupt_load_the_next_put_starts_a_fresh_file(path: Path, saved: bytes) -> None:
    """Once moved aside, the checkpoint writes a new valid file with only the new claim."""
    path.write_bytes(_bad_checksum(saved))
    checkpoint = Checkpoint(path)
    with capture_logs(), pytest.raises(CorruptCheckpointError):
        checkpoint.load()
    checkpoint.put(completed(UID_C))
    reloaded = Checkpoint(path)
    reloaded.load()
    assert reloaded.claims == {UID_C: completed(UID_C)}
    assert len([p for p in path.parent.iterdir() if ASIDE.fullmatch(p.name)]) == 1


def test_a_file_replaced_by_another_process_is_read_again(tmp_path: Path) -> None:
    """Load skips a file it wrote itself, but not one another plugin process replaced."""
    ours = Checkpoint(tmp_path / "checkpoint.json")
    ours.put(started(UID_A))
    theirs = Checkpoint(tmp_path / "checkpoint.json")
    theirs.load()
    theirs.put(completed(UID_B))  # a rolling update's other pod, through a rename
    ours.load()
    assert set(ours.claims) == {UID_A, UID_B}
    assert ours.claims[UID_B] == completed(UID_B)


def test_a_batch_is_one_write_with_the_same_bytes_as_one_by_one(tmp_path: Path) -> None:
    """put(*entries) writes once, and the file equals the one written entry by entry."""
    batched, single = Checkpoint(tmp_path / "a.json"), Checkpoint(tmp_path / "b.json")
    before = batched.path.exists()
    batched.put(completed(UID_A), started(UID_B), completed(UID_C))
    for entry in (completed(UID_A), started(UID_B), completed(UID_C)):
        single.put(entry)
    assert not before
    assert batched.path.read_bytes() == single.path.read_bytes()
    batched.remove(UID_B, UID_C, "not-there")
    single.remove(UID_B)
    single.remove(UID_C)
    assert batched.path.read_bytes() == single.path.read_bytes()
    reread = Checkpoint(tmp_path / "a.json")
    reread.load()
    assert reread.claims == {UID_A: completed(UID_A)}
