"""The kubelet plugin's checkpoint (format 2): one file per call, migration, unknown formats."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from dra_driver.api import Backend, Isolation, Priority
from dra_driver.kubeletplugin import checkpoint_codec
from dra_driver.kubeletplugin.checkpoint import (
    Checkpoint,
    CorruptCheckpointError,
    UnknownCheckpointVersionError,
)
from dra_driver.kubeletplugin.entries import ClaimEntry, ClaimState, PreparedDevice, ShareCard
from dra_driver.kubeletplugin.monitor import monitored_claims

UID_A = "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0"
UID_B = "1a2b3c4d-5e6f-4a0b-8c1d-2e3f4a5b6c7d"
UID_C = "9e8d7c6b-5a49-4837-a261-504f3e2d1c0b"
SHARE = "11111111-2222-4333-8444-555555555555"
STAMP = r"\d{8}T\d{6}\.\d{6}Z"
GPU = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
GI = 1 << 30
SHARE_JSON = {"backend": "hami-core", "isolation": "burst-share", "priority": "online"}


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
        spec=canonical(spec),
    )


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def format_1(entries: list[ClaimEntry], version: object = 1) -> bytes:
    """Return a checkpoint.json as release 0.1.0 wrote it."""
    claims = {entry.uid: entry.to_json() for entry in entries}
    checksum = hashlib.sha256(canonical(claims).encode()).hexdigest()
    return (canonical({"checksum": checksum, "claims": claims, "version": version}) + "\n").encode()


def files(plugin_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in (plugin_dir / "checkpoint").iterdir()}


def reloaded(plugin_dir: Path) -> dict[str, ClaimEntry]:
    checkpoint = Checkpoint(plugin_dir)
    checkpoint.load()
    return checkpoint.claims


def test_put_and_remove_persist_and_reload_identically(tmp_path: Path) -> None:
    """Entries put, replaced and removed read back from a fresh Checkpoint exactly as kept."""
    checkpoint = Checkpoint(tmp_path)
    checkpoint.put(completed(UID_A, "old"), completed(UID_B))
    checkpoint.put(completed(UID_C))
    checkpoint.put(completed(UID_A))
    checkpoint.remove(UID_C, "not-there")
    assert (
        reloaded(tmp_path)
        == checkpoint.claims
        == {UID_A: completed(UID_A), UID_B: completed(UID_B)}
    )
    entry = reloaded(tmp_path)[UID_B]
    assert isinstance(entry.devices[1].request_names, tuple)
    assert (entry.devices[0].share_id, entry.devices[1].share_id) == (SHARE, None)
    assert sorted(files(tmp_path)) == [f"{UID_A}.json"]  # the replaced claim took its place


def test_a_prepare_call_is_one_file_with_the_checksum_of_its_claims(tmp_path: Path) -> None:
    """A put writes one version-2 file named after its first claim, signed over the list."""
    Checkpoint(tmp_path).put(completed(UID_B), completed(UID_A))
    assert list(files(tmp_path)) == [f"{UID_B}.json"]
    data = files(tmp_path)[f"{UID_B}.json"]
    claims = [completed(UID_B).to_json(), completed(UID_A).to_json()]
    checksum = hashlib.sha256(canonical(claims).encode()).hexdigest()
    expected = canonical({"checksum": checksum, "claims": claims, "version": 2}) + "\n"
    assert data == expected.encode()


def test_a_file_of_one_claim_from_an_earlier_build_is_read(tmp_path: Path) -> None:
    """Early builds of format 2 wrote {"checksum", "claim", "version": 2} per claim: read."""
    claim = completed(UID_A).to_json()
    checksum = hashlib.sha256(canonical(claim).encode()).hexdigest()
    (tmp_path / "checkpoint").mkdir()
    document = {"checksum": checksum, "claim": claim, "version": 2}
    (tmp_path / "checkpoint" / f"{UID_A}.json").write_text(canonical(document) + "\n")
    checkpoint = Checkpoint(tmp_path)
    checkpoint.load()
    assert checkpoint.claims == {UID_A: completed(UID_A)}
    checkpoint.remove(UID_A)
    assert files(tmp_path) == {}


def test_files_are_private_to_the_plugin(tmp_path: Path) -> None:
    """The directory is 0700 and every file 0600: claims' env and paths are the node's own."""
    Checkpoint(tmp_path).put(completed(UID_A))
    assert stat.S_IMODE((tmp_path / "checkpoint").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "checkpoint" / f"{UID_A}.json").stat().st_mode) == 0o600


def test_only_completed_prepares_are_recorded(tmp_path: Path) -> None:
    """put() of an unfinished entry is a programming error and writes nothing."""
    checkpoint = Checkpoint(tmp_path)
    with pytest.raises(ValueError, match="only completed prepares are recorded"):
        checkpoint.put(started(UID_A))
    assert not (tmp_path / "checkpoint").exists() or files(tmp_path) == {}
    assert checkpoint.claims == {}


def test_a_batch_cut_by_a_failed_fsync_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed fsync leaves no file and no claim of the batch; a new put succeeds afresh."""
    checkpoint = Checkpoint(tmp_path)
    checkpoint.put(completed(UID_C))

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output error"):
        checkpoint.put(completed(UID_A), completed(UID_B))
    monkeypatch.undo()
    assert checkpoint.claims == {UID_C: completed(UID_C)}
    assert sorted(files(tmp_path)) == [f"{UID_C}.json"]  # no temporaries, no partial file
    assert reloaded(tmp_path) == checkpoint.claims
    checkpoint.put(completed(UID_A), completed(UID_B))
    assert (
        reloaded(tmp_path)
        == checkpoint.claims
        == {uid: completed(uid) for uid in (UID_A, UID_B, UID_C)}
    )


def recorded(plugin_dir: Path) -> dict[str, list[str]]:
    """Return each file's claims in order, as written."""
    return {
        name: [claim["uid"] for claim in json.loads(data)["claims"]]
        for name, data in files(plugin_dir).items()
    }


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.booleans(), st.lists(st.sampled_from([UID_A, UID_B, UID_C]), min_size=1, max_size=3)
        ),
        max_size=12,
    )
)
def test_the_directory_always_holds_exactly_the_claims_in_memory(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[bool, list[str]]]
) -> None:
    """After any puts and removes each claim is in one file named after its first claim."""
    plugin_dir = tmp_path_factory.mktemp("plugin")
    checkpoint = Checkpoint(plugin_dir)
    checkpoint.load()
    for put, uids in steps:
        if put:
            checkpoint.put(*(completed(uid, f"n{len(checkpoint.claims)}") for uid in uids))
        else:
            checkpoint.remove(*uids)
        on_disk = recorded(plugin_dir)
        assert all(name == f"{uids[0]}.json" for name, uids in on_disk.items())
        assert sorted(uid for uids in on_disk.values() for uid in uids) == sorted(checkpoint.claims)
        assert reloaded(plugin_dir) == checkpoint.claims


def test_unprepare_takes_claims_out_of_the_file_of_their_call(tmp_path: Path) -> None:
    """The rest of a call's claims stay in one file, named after whichever is now first."""
    checkpoint = Checkpoint(tmp_path)
    checkpoint.put(completed(UID_A), completed(UID_B), completed(UID_C))
    checkpoint.remove(UID_B)
    assert recorded(tmp_path) == {f"{UID_A}.json": [UID_A, UID_C]}
    checkpoint.remove(UID_A)
    assert recorded(tmp_path) == {f"{UID_C}.json": [UID_C]}
    assert reloaded(tmp_path) == checkpoint.claims == {UID_C: completed(UID_C)}
    checkpoint.remove(UID_C)
    assert files(tmp_path) == {}


def test_a_claim_left_in_two_files_by_a_crash_reads_once_and_goes_from_both(
    tmp_path: Path,
) -> None:
    """A replaced claim still in its older file (a crash between) is one claim to memory."""
    Checkpoint(tmp_path).put(completed(UID_A), completed(UID_B))
    older = files(tmp_path)[f"{UID_A}.json"]
    Checkpoint(tmp_path).put(completed(UID_B, "again"))
    (tmp_path / "checkpoint" / f"{UID_A}.json").write_bytes(older)  # as before the take-out
    checkpoint = Checkpoint(tmp_path)
    checkpoint.load()
    assert set(checkpoint.claims) == {UID_A, UID_B}
    checkpoint.remove(UID_B)
    assert recorded(tmp_path) == {f"{UID_A}.json": [UID_A]}


def test_load_reads_what_another_plugin_process_added_and_forgets_what_it_removed(
    tmp_path: Path,
) -> None:
    """A rolling update's other pod writes under the node lock: the next load catches up."""
    ours, theirs = Checkpoint(tmp_path), Checkpoint(tmp_path)
    ours.put(completed(UID_A), completed(UID_B))
    ours.load()
    theirs.load()
    theirs.put(completed(UID_C))
    theirs.remove(UID_B)  # the file of A and B rewritten in place, under the same name
    ours.load()
    assert ours.claims == {UID_A: completed(UID_A), UID_C: completed(UID_C)}
    theirs.remove(UID_A)
    ours.load()
    assert ours.claims == {UID_C: completed(UID_C)}


def _one_byte(data: bytes) -> bytes:
    return data.replace(b'"team-a"', b'"team-b"', 1)


def _checksum(data: bytes) -> bytes:
    return re.sub(rb'"checksum":"[0-9a-f]+"', b'"checksum":"' + b"0" * 64 + b'"', data)


def _resigned(edit: Callable[[dict[str, object]], object]) -> Callable[[bytes], bytes]:
    """Edit the document and give it a checksum that matches its (edited) claim."""

    def tamper(data: bytes) -> bytes:
        document = json.loads(data)
        edit(document)
        claims = document.get("claims")
        document["checksum"] = hashlib.sha256(canonical(claims).encode()).hexdigest()
        return canonical(document).encode()

    return tamper


TAMPERINGS: list[object] = [
    pytest.param(_one_byte, "checksum mismatch", id="one-byte-of-the-claim"),
    pytest.param(_checksum, "checksum mismatch", id="checksum"),
    pytest.param(lambda data: data[: len(data) // 2], "", id="cut-short"),
    pytest.param(lambda _: b"", "", id="empty"),
    pytest.param(lambda _: b"[1, 2]\n", "not a JSON object", id="not-an-object"),
    pytest.param(
        _resigned(lambda d: d.update(version="2")), "no valid format version", id="version-string"
    ),
    pytest.param(_resigned(lambda d: d.update(version=0)), "no valid format", id="version-0"),
    pytest.param(_resigned(lambda d: d.pop("claims")), "not a list of JSON", id="no-claims"),
    pytest.param(_resigned(lambda d: d.update(claims=[])), "not a list of JSON", id="no-claim"),
    pytest.param(
        _resigned(lambda d: d.update(claims=d["claims"] * 2)), "recorded twice", id="twice"
    ),
    pytest.param(
        _resigned(lambda d: d["claims"][0].update(state="PrepareHalfway")),  # type: ignore[attr-defined]
        "PrepareHalfway",
        id="unknown-state",
    ),
    pytest.param(
        _resigned(lambda d: d["claims"][0].update(share={**SHARE_JSON, "priority": "urgent"})),  # type: ignore[attr-defined]
        "share.priority is 'urgent', not one of online, offline",
        id="unknown-priority",
    ),
    pytest.param(
        _resigned(lambda d: d["claims"][0].update(share={**SHARE_JSON, "backend": "cuda"})),  # type: ignore[attr-defined]
        "share.backend is 'cuda', not one of hami-core, mps, none",
        id="unknown-backend",
    ),
    pytest.param(
        _resigned(lambda d: d["claims"][0].update(uid=UID_C)),  # type: ignore[attr-defined]
        f"holds claim {UID_C} first",
        id="another-claim-inside",
    ),
]


@pytest.mark.parametrize(("tamper", "problem"), TAMPERINGS)
def test_a_damaged_entry_is_moved_aside_and_the_others_kept(
    tmp_path: Path, tamper: Callable[[bytes], bytes], problem: str
) -> None:
    """A damaged file is renamed .corrupt-<time>, logged, its name kept as damaged; others stay."""
    Checkpoint(tmp_path).put(completed(UID_A), completed(UID_C))
    Checkpoint(tmp_path).put(completed(UID_B))
    path = tmp_path / "checkpoint" / f"{UID_A}.json"
    tampered = tamper(path.read_bytes())
    path.write_bytes(tampered)
    checkpoint = Checkpoint(tmp_path)
    with capture_logs() as logs:
        checkpoint.load()
    assert checkpoint.claims == {UID_B: completed(UID_B)}  # C, in A's file, is forgotten too
    assert checkpoint.damaged == {UID_A}
    (aside,) = (tmp_path / "checkpoint").glob(f"{UID_A}.json.corrupt-*")
    assert re.fullmatch(rf"{UID_A}\.json\.corrupt-{STAMP}", aside.name)
    assert aside.read_bytes() == tampered
    (event,) = [e for e in logs if e["event"] == "checkpoint.corrupt_entry"]
    assert (event["log_level"], event["claim_uid"], event["moved_to"]) == (
        "error",
        UID_A,
        str(aside),
    )
    assert problem in event["error"]
    # A later start still knows a file was damaged (unrecorded files are left alone).
    again = Checkpoint(tmp_path)
    again.load()
    assert again.damaged == {UID_A}


def test_an_entry_that_is_a_symlink_is_set_aside_not_followed(tmp_path: Path) -> None:
    """A planted symlink is never read through: the link itself is moved aside."""
    Checkpoint(tmp_path).put(completed(UID_B))
    target = tmp_path / "secret"
    target.write_bytes((tmp_path / "checkpoint" / f"{UID_B}.json").read_bytes())
    (tmp_path / "checkpoint" / f"{UID_A}.json").symlink_to(target)
    checkpoint = Checkpoint(tmp_path)
    with capture_logs():
        checkpoint.load()
    assert set(checkpoint.claims) == {UID_B}
    assert checkpoint.damaged == {UID_A}
    assert target.exists()


def test_an_entry_of_a_newer_format_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    """Format 3 raises UnknownCheckpointVersionError naming the file's claim; no file moves."""
    Checkpoint(tmp_path).put(completed(UID_B))
    newer = tmp_path / "checkpoint" / f"{UID_A}.json"
    newer.write_bytes(b'{"checksum": "x", "claims": [], "version": 3}\n')
    before = files(tmp_path)
    with pytest.raises(UnknownCheckpointVersionError, match=f"claim {UID_A} has format version 3"):
        Checkpoint(tmp_path).load()
    assert files(tmp_path) == before


def test_a_format_1_checkpoint_is_migrated_to_one_file_of_its_completed_claims(
    tmp_path: Path,
) -> None:
    """0.1.0's checkpoint.json becomes one file (unfinished claims dropped) and is kept aside."""
    legacy = format_1([completed(UID_A), started(UID_B), completed(UID_C, "third")])
    (tmp_path / "checkpoint.json").write_bytes(legacy)
    checkpoint = Checkpoint(tmp_path)
    with capture_logs() as logs:
        checkpoint.load()
    assert checkpoint.claims == {UID_A: completed(UID_A), UID_C: completed(UID_C, "third")}
    assert reloaded(tmp_path) == checkpoint.claims
    assert not (tmp_path / "checkpoint.json").exists()
    assert (tmp_path / "checkpoint.json.migrated").read_bytes() == legacy
    (event,) = [e for e in logs if e["event"] == "checkpoint.migrated"]
    assert (event["claims"], event["rolled_back"]) == (2, 1)
    assert recorded(tmp_path) == {f"{UID_A}.json": [UID_A, UID_C]}


def test_a_checkpoint_json_written_beside_format_2_is_merged_in(tmp_path: Path) -> None:
    """An 0.1.0 plugin still running in a rolling update restarts checkpoint.json: merge it."""
    Checkpoint(tmp_path).put(completed(UID_B))  # migrated or prepared by this release
    (tmp_path / "checkpoint.json").write_bytes(format_1([completed(UID_A), started(UID_C)]))
    with capture_logs():
        assert reloaded(tmp_path) == {UID_A: completed(UID_A), UID_B: completed(UID_B)}
    assert sorted(files(tmp_path)) == sorted([f"{UID_A}.json", f"{UID_B}.json"])
    assert not (tmp_path / "checkpoint.json").exists()


def test_a_migration_adds_to_a_file_of_the_same_name_without_losing_its_claims(
    tmp_path: Path,
) -> None:
    """Migrated claims named like a file of several claims join it: none of its claims is lost."""
    Checkpoint(tmp_path).put(completed(UID_A), completed(UID_B))
    (tmp_path / "checkpoint.json").write_bytes(format_1([completed(UID_A, "legacy")]))
    with capture_logs():
        assert reloaded(tmp_path) == {UID_A: completed(UID_A, "legacy"), UID_B: completed(UID_B)}
    assert recorded(tmp_path) == {f"{UID_A}.json": [UID_A, UID_B]}


@pytest.mark.parametrize("version", [2, 7, "1"])
def test_a_checkpoint_json_of_another_version_is_refused_and_kept(
    tmp_path: Path, version: object
) -> None:
    """checkpoint.json of a version other than 1 is never migrated, moved or discarded."""
    data = format_1([completed(UID_A)], version=version)
    (tmp_path / "checkpoint.json").write_bytes(data)
    with pytest.raises(UnknownCheckpointVersionError) as raised:
        Checkpoint(tmp_path).load()
    assert str(raised.value) == (
        f"{tmp_path / 'checkpoint.json'} has format version {version!r}; this plugin migrates "
        "only format 1. It was written by another release of the plugin: run that release (or "
        "a later one) on this node"
    )
    assert (tmp_path / "checkpoint.json").read_bytes() == data
    assert files(tmp_path) == {}


def test_a_damaged_format_1_checkpoint_is_moved_aside_and_reported(tmp_path: Path) -> None:
    """A checkpoint.json failing its checksum raises CorruptCheckpointError and moves aside."""
    damaged = _checksum(format_1([completed(UID_A)]))
    (tmp_path / "checkpoint.json").write_bytes(damaged)
    checkpoint = Checkpoint(tmp_path)
    with capture_logs() as logs, pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
        checkpoint.load()
    (aside,) = tmp_path.glob("checkpoint.json.corrupt-*")
    assert aside.read_bytes() == damaged
    assert [e["log_level"] for e in logs if e["event"] == "checkpoint.corrupt"] == ["error"]
    assert reloaded(tmp_path) == {}


def written_before_shares(uid: str) -> ClaimEntry:
    """Return an entry as releases before the share wrote it: policy only in the spec's env."""
    env = [
        f"GPUSHARE_DEVICE_UUIDS={GPU}", "GPUSHARE_CORES_0=30", f"GPUSHARE_MEMORY_BYTES_0={GI}",
        "GPUSHARE_ISOLATION=fixed-share", "GPUSHARE_PRIORITY=offline", "GPUSHARE_BACKEND=hami-core",
    ]  # fmt: skip
    entry = completed(uid)
    assert entry.spec is not None
    spec = {**json.loads(entry.spec), "containerEdits": {"env": env}}
    return dataclasses.replace(entry, spec=canonical(spec))


@pytest.mark.parametrize("legacy", [False, True], ids=["format-2", "format-1"])
def test_an_entry_without_a_share_is_monitored_after_the_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, legacy: bool
) -> None:
    """An old entry gets its share from its spec once, at load, and is written back: monitored."""
    if legacy:
        (tmp_path / "checkpoint.json").write_bytes(format_1([written_before_shares(UID_A)]))
    else:
        Checkpoint(tmp_path).put(written_before_shares(UID_A))
    with capture_logs() as logs:
        (claim,) = monitored_claims(reloaded(tmp_path).values())
    assert [e["claim_uid"] for e in logs if e["event"] == "checkpoint.share_migrated"] == [UID_A]
    assert (claim.uid, claim.info.backend, claim.info.isolation, claim.info.priority) == (
        UID_A, Backend.HAMI_CORE, Isolation.FIXED_SHARE, Priority.OFFLINE,
    )  # fmt: skip
    assert claim.info.cards == (ShareCard(GPU, 30, GI),)

    def derived_again(spec: object) -> None:
        raise AssertionError("the share was derived a second time")

    monkeypatch.setattr(checkpoint_codec, "legacy_share", derived_again)
    assert reloaded(tmp_path)[UID_A].share == claim.info
