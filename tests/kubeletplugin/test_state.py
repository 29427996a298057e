"""ClaimPreparer in-process: prepare, unprepare and start-up reconciliation with fakes only."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import stat
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, DriverNames, Isolation, Priority
from dra_driver.cdi import StagedFile, spec_file_name, validate_spec
from dra_driver.k8s.errors import NotFoundError
from dra_driver.kubeletplugin import checkpoint as checkpoint_module
from dra_driver.kubeletplugin.checkpoint import Checkpoint, UnknownCheckpointVersionError
from dra_driver.kubeletplugin.entries import ClaimEntry, ClaimRef, ClaimState, PreparedDevice
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.kubeletplugin.state import ClaimPreparer
from dra_driver.nvml.inventory import Card

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
DRIVER = NAMES.driver
NODE = "node-a"
NAMESPACE = "default"
GIB = 2**30


def card(minor: int, bus: int) -> Card:
    return Card(
        uuid=f"GPU-aaaaaaaa-0000-4000-8000-{minor + 1:012x}",
        product_name="Tesla T4",
        memory_bytes="15360Mi",  # type: ignore[arg-type]  # Card normalises quantities
        pci_bus_id=f"0000:{bus:02x}:00.0",
        minor=minor,
        index=minor,
        architecture="Turing",
        cuda_compute_capability="7.5",
        driver_version="550.54.15",
    )


CARDS = (card(0, 0x3B), card(1, 0xAF))


def new_uid() -> str:
    return str(uuid.uuid4())


def result(
    device: str = "gpu-0",
    *,
    pool: str = NODE,
    request: str = "gpu",
    share_id: str | None = None,
    cores: str = "30",
    memory: str = "5Gi",
) -> dict[str, Any]:
    return {
        "request": request,
        "driver": DRIVER,
        "pool": pool,
        "device": device,
        "shareID": share_id or new_uid(),
        "consumedCapacity": {"cores": cores, "memory": memory},
    }


def config(source: str, driver: str = DRIVER, **fields: str) -> dict[str, Any]:
    parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind, **fields}
    return {"source": source, "opaque": {"driver": driver, "parameters": parameters}}


def claim(
    uid: str,
    name: str,
    results: Sequence[dict[str, Any]] | None = None,
    configs: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    devices: dict[str, Any] = {"results": list(results or [result()])}
    if configs:
        devices["config"] = list(configs)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid},
        "status": {"allocation": {"devices": devices}},
    }


class FakeClaims:
    """The API server's claims, by namespace and name; counts every read."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads: list[tuple[str, str]] = []

    def add(self, obj: dict[str, Any]) -> ClaimRef:
        meta = obj["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = obj
        return ClaimRef(meta["namespace"], meta["uid"], meta["name"])

    def __call__(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads.append((namespace, name))
        try:
            return self.objects[(namespace, name)]
        except KeyError:
            raise NotFoundError("x", status=404) from None


@dataclasses.dataclass
class Node:
    root: Path
    paths: NodePaths
    claims: FakeClaims

    def preparer(self, backend: Backend = Backend.HAMI_CORE) -> ClaimPreparer:
        return ClaimPreparer(
            NAMES,
            NODE,
            self.paths,
            get_claim=self.claims,
            cards=lambda: CARDS,
            default_backend=backend,
        )

    def started(self, backend: Backend = Backend.HAMI_CORE) -> ClaimPreparer:
        preparer = self.preparer(backend)
        preparer.start()
        return preparer

    def spec_path(self, uid: str) -> Path:
        return self.paths.cdi_root / spec_file_name(NAMES, uid)

    def cache_dir(self, uid: str) -> Path:
        return self.paths.host_paths(uid).hami_cache_dir

    def checkpoint(self) -> dict[str, ClaimEntry]:
        checkpoint = Checkpoint(self.paths.plugin_dir)
        checkpoint.load()
        return checkpoint.claims

    def files(self) -> set[Path]:
        return set(self.root.rglob("*"))


@pytest.fixture
def node(tmp_path: Path) -> Node:
    plugin_dir = tmp_path / "var" / "plugins" / DRIVER
    return Node(
        root=tmp_path,
        paths=NodePaths(
            plugin_dir=plugin_dir,
            cdi_root=tmp_path / "var" / "run" / "cdi",
            driver_root=Path("/"),
            hami_core_library=tmp_path / "lib" / "libvgpu.so",
            mps_pipe_directory=tmp_path / "mps",
        ),
        claims=FakeClaims(),
    )


def spec_env(spec: dict[str, Any]) -> dict[str, str]:
    # A container naming the first device's request gets the spec's edits, then the device's.
    edits = [spec.get("containerEdits", {}), spec["devices"][0].get("containerEdits", {})]
    return dict(entry.split("=", 1) for edit in edits for entry in edit.get("env", []))


def prepare_one(preparer: ClaimPreparer, ref: ClaimRef) -> tuple[tuple[PreparedDevice, ...], str]:
    outcome = preparer.prepare([ref])[ref.uid]
    return outcome.devices, outcome.error


def assert_nothing_prepared(node: Node, uid: str) -> None:
    assert not node.spec_path(uid).exists()
    assert uid not in node.checkpoint()
    assert not node.cache_dir(uid).exists()


def test_valid_claim_prepares_devices_spec_and_checkpoint(node: Node) -> None:
    """A claim gets its devices, a valid CDI spec file and a PrepareCompleted checkpoint entry."""
    preparer = node.started()
    uid, share = new_uid(), new_uid()
    ref = node.claims.add(claim(uid, "c1", [result("gpu-1", share_id=share)]))
    devices, error = prepare_one(preparer, ref)
    assert error == ""
    assert devices == (
        PreparedDevice(
            request_names=("gpu",),
            pool_name=NODE,
            device_name="gpu-1",
            cdi_device_ids=(f"k8s.{DRIVER}/claim={uid}-gpu-1-{share}",),
            share_id=share,
        ),
    )
    spec_files = list(node.paths.cdi_root.iterdir())
    assert spec_files == [node.paths.cdi_root / f"k8s.{DRIVER}-claim_{uid}.json"]
    spec = json.loads(spec_files[0].read_text())
    assert validate_spec(spec) == []
    assert spec["kind"] == f"k8s.{DRIVER}/claim"
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-gpu-1-{share}"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] == "/dev/nvidia1"
    env = spec_env(spec)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5120m"
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    assert env["GPUSHARE_CLAIM_UID"] == uid
    assert env["GPUSHARE_DEVICE_UUIDS"] == CARDS[1].uuid
    entry = node.checkpoint()[uid]
    assert entry.state is ClaimState.PREPARE_COMPLETED
    assert (entry.namespace, entry.name) == (NAMESPACE, "c1")
    assert entry.devices == devices
    assert entry.spec is not None
    assert json.loads(entry.spec) == spec
    assert preparer.prepared[uid] == entry
    assert stat.S_IMODE(node.cache_dir(uid).stat().st_mode) == 0o777


def test_second_prepare_answers_from_the_checkpoint(node: Node) -> None:
    """Preparing a prepared claim again returns the same devices without reading the claim."""
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1"))
    first = preparer.prepare([ref])
    spec = node.spec_path(ref.uid).read_bytes()
    assert node.claims.reads == [(NAMESPACE, "c1")]
    node.claims.objects.clear()  # a read now would fail
    second = preparer.prepare([ref])
    assert second == first
    assert first[ref.uid].devices
    assert node.claims.reads == [(NAMESPACE, "c1")]
    assert node.spec_path(ref.uid).read_bytes() == spec


def test_replaced_claim_fails_alone(node: Node) -> None:
    """A UID mismatch errors with "was replaced" while another claim in the call prepares."""
    preparer = node.started()
    good = node.claims.add(claim(new_uid(), "good"))
    current = node.claims.add(claim(new_uid(), "reused"))
    stale = ClaimRef(NAMESPACE, new_uid(), "reused")
    outcomes = preparer.prepare([stale, good])
    assert "was replaced" in outcomes[stale.uid].error
    assert current.uid in outcomes[stale.uid].error
    assert outcomes[stale.uid].devices == ()
    assert outcomes[good.uid].error == ""
    assert len(outcomes[good.uid].devices) == 1
    assert_nothing_prepared(node, stale.uid)
    assert node.spec_path(good.uid).exists()
    assert set(node.checkpoint()) == {good.uid}


def test_missing_claim_is_an_error(node: Node) -> None:
    """A claim the API server does not have errors as not found; nothing is written."""
    preparer = node.started()
    ref = ClaimRef(NAMESPACE, new_uid(), "gone")
    _, error = prepare_one(preparer, ref)
    assert error == f"claim {NAMESPACE}/gone not found"
    assert_nothing_prepared(node, ref.uid)


def test_hostile_uid_is_refused_and_writes_nothing(node: Node) -> None:
    """A UID "../../etc" fails the name check before any read or write, on prepare and unprepare."""
    preparer = node.started()
    before = node.files()
    ref = ClaimRef(NAMESPACE, "../../etc", "c1")
    node.claims.add(claim("../../etc", "c1"))
    _, error = prepare_one(preparer, ref)
    assert error.startswith('invalid claim UID "../../etc": ')
    assert node.claims.reads == []
    assert preparer.unprepare([ref]) == {ref.uid: error}
    assert node.files() == before
    assert preparer.prepared == {}


def test_class_and_claim_config_merge(node: Node) -> None:
    """Class isolation fixed-share and claim priority offline both reach the spec's env."""
    preparer = node.started()
    configs = [
        config("FromClaim", priority="offline"),
        config("FromClass", isolation="fixed-share"),
        config("FromClaim", driver="other.example.com", isolation="nonsense"),
    ]
    ref = node.claims.add(claim(new_uid(), "c1", configs=configs))
    _, error = prepare_one(preparer, ref)
    assert error == ""
    env = spec_env(json.loads(node.spec_path(ref.uid).read_text()))
    assert env["GPU_CORE_UTILIZATION_POLICY"] == "force"
    assert env["CUDA_TASK_PRIORITY"] == "1"
    assert env["GPUSHARE_ISOLATION"] == "fixed-share"
    assert env["GPUSHARE_PRIORITY"] == "offline"


def test_claim_config_overrides_class_field(node: Node) -> None:
    """A claim's isolation wins over the class's, even when listed before it."""
    preparer = node.started()
    configs = [
        config("FromClaim", isolation="burst-share"),
        config("FromClass", isolation="fixed-share", priority="offline"),
    ]
    ref = node.claims.add(claim(new_uid(), "c1", configs=configs))
    _, error = prepare_one(preparer, ref)
    assert error == ""
    env = spec_env(json.loads(node.spec_path(ref.uid).read_text()))
    assert env["GPU_CORE_UTILIZATION_POLICY"] == "default"
    assert env["GPUSHARE_ISOLATION"] == "burst-share"
    assert env["CUDA_TASK_PRIORITY"] == "1"


@pytest.mark.parametrize("valid_before", [0, 1])
def test_invalid_config_names_the_field(node: Node, valid_before: int) -> None:
    """An unknown config field errors with its full path in the allocation, at its real index."""
    preparer = node.started()
    configs = [config("FromClass", isolation="fixed-share")] * valid_before
    configs.append(config("FromClaim", colour="red"))
    ref = node.claims.add(claim(new_uid(), "c1", configs=configs))
    _, error = prepare_one(preparer, ref)
    field = f"status.allocation.devices.config[{valid_before}].opaque.parameters.colour"
    assert error.startswith(f"invalid config: {field}: ")
    assert_nothing_prepared(node, ref.uid)


@pytest.mark.parametrize(
    ("default_backend", "fields"),
    [
        pytest.param(Backend.HAMI_CORE, {"backend": "mps", "isolation": "burst-share"}, id="cfg"),
        pytest.param(Backend.MPS, {}, id="node-default-mps"),
    ],
)
def test_mps_refuses_burst_share(
    node: Node, default_backend: Backend, fields: dict[str, str]
) -> None:
    """Backend mps with isolation burst-share is refused with the backend's own message."""
    preparer = node.started(default_backend)
    configs = [config("FromClaim", **fields)] if fields else []
    ref = node.claims.add(claim(new_uid(), "c1", configs=configs))
    _, error = prepare_one(preparer, ref)
    assert error.startswith('backend "mps": isolation "burst-share": ')
    assert 'use isolation "fixed-share"' in error
    assert_nothing_prepared(node, ref.uid)


def test_device_from_another_pool_is_refused(node: Node) -> None:
    """A result in another node's pool errors naming the pool; nothing is written."""
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1", [result(pool="node-b")]))
    _, error = prepare_one(preparer, ref)
    assert error == "device gpu-0 is in pool 'node-b', not 'node-a'"
    assert_nothing_prepared(node, ref.uid)


def test_device_that_is_not_a_card_is_refused(node: Node) -> None:
    """A result naming a device the node does not have errors; nothing is written."""
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1", [result("gpu-7")]))
    _, error = prepare_one(preparer, ref)
    assert error == "device gpu-7 is not a card of node node-a"
    assert_nothing_prepared(node, ref.uid)


def test_unprepare_of_unknown_claim_succeeds(node: Node) -> None:
    """Unpreparing a claim never prepared answers "" and changes nothing."""
    preparer = node.started()
    before = node.files()
    ref = ClaimRef(NAMESPACE, new_uid(), "never")
    assert preparer.unprepare([ref]) == {ref.uid: ""}
    assert node.files() == before


def test_unprepare_removes_spec_entry_and_cache_dir(node: Node) -> None:
    """Unprepare removes the claim's spec, checkpoint entry and HAMi cache dir, nothing else."""
    preparer = node.started()
    gone = node.claims.add(claim(new_uid(), "gone"))
    kept = node.claims.add(claim(new_uid(), "kept"))
    preparer.prepare([gone, kept])
    (node.cache_dir(gone.uid) / "cudevshr.cache").write_bytes(b"region")
    assert node.spec_path(gone.uid).exists()
    assert preparer.unprepare([gone]) == {gone.uid: ""}
    assert_nothing_prepared(node, gone.uid)
    assert set(preparer.prepared) == {kept.uid}
    assert node.spec_path(kept.uid).exists()
    assert node.cache_dir(kept.uid).is_dir()
    assert set(node.checkpoint()) == {kept.uid}


def test_start_rolls_back_a_prepare_cut_short_before_its_entry(node: Node) -> None:
    """A spec and a cache dir that no entry names (a crash mid-prepare) are removed at start."""
    kept = node.claims.add(claim(new_uid(), "kept"))
    node.started().prepare([kept])
    uid = new_uid()
    node.spec_path(uid).write_text("{}")
    node.cache_dir(uid).mkdir(parents=True)
    (node.cache_dir(uid) / "cudevshr.cache").write_bytes(b"region")
    with capture_logs() as logs:
        preparer = node.started()
    assert_nothing_prepared(node, uid)
    assert set(preparer.prepared) == {kept.uid}
    assert node.spec_path(kept.uid).exists()
    assert node.cache_dir(kept.uid).is_dir()
    removed = [
        e.get("spec") or e.get("directory") for e in logs if e["event"] == "state.orphan_removed"
    ]
    assert sorted(removed) == sorted([str(node.spec_path(uid)), str(node.cache_dir(uid))])


def test_start_rewrites_a_spec_cut_short_by_a_power_cut(node: Node) -> None:
    """Specs are not fsynced: an empty or damaged spec of a completed claim is rewritten."""
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1"))
    preparer.prepare([ref])
    spec = node.spec_path(ref.uid)
    original = spec.read_bytes()
    spec.write_bytes(b"")
    node.started()
    assert spec.read_bytes() == original


def test_an_entry_of_a_newer_format_refuses_start_and_touches_nothing(node: Node) -> None:
    """A rollback that finds format-3 entries fails start with the fix; no file is changed."""
    preparer = node.started()
    refs = [node.claims.add(claim(new_uid(), f"c{i}")) for i in range(2)]
    preparer.prepare(refs)
    # A claim a newer plugin prepared (a rolling update went back and forth).
    newer_uid = new_uid()
    newer = node.paths.plugin_dir / "checkpoint" / f"{newer_uid}.json"
    newer.write_bytes(b'{"version": 3, "claim": {"whatever": 1}}\n')
    node.spec_path(newer_uid).write_text("{}")
    before = {path: path.read_bytes() for path in node.files() if path.is_file()}
    with pytest.raises(UnknownCheckpointVersionError) as raised:
        node.started()
    assert str(raised.value) == (
        f"checkpoint entry of claim {newer_uid} has format version 3; this plugin reads "
        "format 2. It was written by another release of the plugin: run that release (or a "
        "later one) on this node"
    )
    # The plugin already running refuses its calls the same way, and deletes nothing either.
    answers = preparer.unprepare(refs)
    assert set(answers.values()) == {str(raised.value)}
    assert {path: path.read_bytes() for path in node.files() if path.is_file()} == before


def test_a_damaged_entry_is_set_aside_and_its_claim_left_alone(node: Node) -> None:
    """A damaged entry is renamed; its claim's spec stays; the kubelet's next prepare redoes it."""
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1"))
    preparer.prepare([ref])
    entry = node.paths.plugin_dir / "checkpoint" / f"{ref.uid}.json"
    entry.write_bytes(entry.read_bytes().replace(b'"c1"', b'"c2"'))
    with capture_logs() as logs:
        restarted = node.started()
    assert [e["claim_uid"] for e in logs if e["event"] == "checkpoint.corrupt_entry"] == [ref.uid]
    assert ref.uid not in restarted.prepared
    assert node.spec_path(ref.uid).exists()
    (aside,) = entry.parent.glob(f"{ref.uid}.json.corrupt-*")
    assert b'"c2"' in aside.read_bytes()
    # Still left alone at the next start, then prepared afresh when the kubelet asks.
    node.started()
    assert node.spec_path(ref.uid).exists()
    _, error = prepare_one(restarted, ref)
    assert error == ""
    assert set(node.checkpoint()) == {ref.uid}


def test_a_damaged_file_of_two_claims_keeps_every_unrecorded_file(node: Node) -> None:
    """Both claims of a damaged call's file keep their specs and directories at every start."""
    preparer = node.started()
    refs = [node.claims.add(claim(new_uid(), f"c{i}")) for i in range(2)]
    preparer.prepare(refs)
    crashed = new_uid()  # a spec no file names: removed at start only when nothing is damaged
    node.spec_path(crashed).write_text("{}")
    entry = node.paths.plugin_dir / "checkpoint" / f"{refs[0].uid}.json"
    entry.write_bytes(entry.read_bytes().replace(b'"c1"', b'"c9"'))
    with capture_logs() as logs:
        restarted = node.started()
    assert restarted.prepared == {}
    (kept,) = [e for e in logs if e["event"] == "state.orphans_kept"]
    assert kept["damaged"] == [refs[0].uid]
    for uid in (refs[0].uid, refs[1].uid, crashed):
        assert node.spec_path(uid).exists()
        assert node.paths.host_paths(uid).hami_cache_dir.is_dir() or uid == crashed
    assert set(restarted.unprepare(refs).values()) == {""}
    assert not node.spec_path(refs[1].uid).exists()


def test_start_removes_orphan_specs_and_keeps_foreign_files(node: Node) -> None:
    """Our spec files without an entry are removed; other vendors' files and ours with one stay."""
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1"))
    preparer.prepare([ref])
    orphan = node.spec_path(new_uid())
    orphan.write_text("{}")
    cdi = node.paths.cdi_root
    foreign = [
        cdi / "nvidia.com-gpu.json",
        cdi / f"k8s.other.dra.dev-claim_{new_uid()}.json",
        cdi / f"k8s.{DRIVER}-claim_{new_uid()}.yaml",
    ]
    for path in foreign:
        path.write_text("{}")
    node.started()
    assert not orphan.exists()
    assert all(path.exists() for path in foreign)
    assert node.spec_path(ref.uid).exists()


def test_start_rewrites_a_vanished_spec_identically(node: Node) -> None:
    """A PrepareCompleted claim whose spec vanished gets it back byte for byte at start."""
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1"))
    preparer.prepare([ref])
    spec = node.spec_path(ref.uid)
    original, mode = spec.read_bytes(), stat.S_IMODE(spec.stat().st_mode)
    spec.unlink()
    restarted = node.started()
    assert spec.read_bytes() == original
    assert stat.S_IMODE(spec.stat().st_mode) == mode
    assert restarted.prepared[ref.uid].state is ClaimState.PREPARE_COMPLETED
    assert node.claims.reads == [(NAMESPACE, "c1")]


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b'{"version": 1, "checksum": "0", "claims": {}}', id="bad-checksum"),
        pytest.param(b"\x00garbage", id="garbage"),
    ],
)
def test_corrupt_checkpoint_at_start_is_moved_aside(node: Node, content: bytes) -> None:
    """start() survives a corrupt checkpoint: it is moved aside and the plugin starts empty."""
    preparer = node.started()
    ref = node.claims.add(claim(new_uid(), "c1"))
    preparer.prepare([ref])
    # A node of release 0.1.0: its one checkpoint file (format 1), damaged.
    shutil.rmtree(node.paths.plugin_dir / "checkpoint")
    path = node.paths.plugin_dir / "checkpoint.json"
    path.write_bytes(content)
    with capture_logs() as logs:
        restarted = node.started()
    assert restarted.prepared == {}
    assert not path.exists()
    (aside,) = node.paths.plugin_dir.glob("checkpoint.json.corrupt-*")
    assert aside.read_bytes() == content
    assert [e["log_level"] for e in logs if e["event"] == "checkpoint.corrupt"] == ["error"]
    # Reconciled against the empty state: the spec it no longer knows is an orphan.
    assert not node.spec_path(ref.uid).exists()
    other = node.claims.add(claim(new_uid(), "c2"))
    _, error = prepare_one(restarted, other)
    assert error == ""
    assert set(node.checkpoint()) == {other.uid}


def test_a_batch_writes_one_checkpoint_file_and_syncs_the_directory_once(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 40 claims on the node, 32 new claims cost one file and one directory sync."""
    preparer = node.started()
    preparer.prepare([node.claims.add(claim(new_uid(), f"old{i}")) for i in range(40)])
    refs = [node.claims.add(claim(new_uid(), f"c{i}")) for i in range(32)]
    writes: list[Path] = []
    syncs: list[Path] = []
    real_sync = checkpoint_module.sync_directory_of

    class Counted(StagedFile):
        def commit(self, *, sync_file: bool = True) -> None:
            assert sync_file, "an entry is fsynced before it is renamed into place"
            writes.append(self.path)
            super().commit(sync_file=sync_file)

    def synced(path: Path) -> None:
        syncs.append(path.parent)
        real_sync(path)

    monkeypatch.setattr(checkpoint_module, "StagedFile", Counted)
    monkeypatch.setattr(checkpoint_module, "sync_directory_of", synced)
    answers = preparer.prepare(refs)
    assert all(outcome.error == "" for outcome in answers.values())
    directory = node.paths.plugin_dir / "checkpoint"
    assert writes == [directory / f"{refs[0].uid}.json"]
    assert syncs == [directory]
    assert {e.state for e in node.started().prepared.values()} == {ClaimState.PREPARE_COMPLETED}
    writes.clear()
    syncs.clear()
    assert set(preparer.unprepare(refs).values()) == {""}
    assert (writes, syncs) == ([], [directory])
    assert len(node.checkpoint()) == 40


def test_a_hami_core_claim_reserved_for_two_pods_is_refused(node: Node) -> None:
    """Two pods' processes cannot share one accounting region: prepare says so, nothing written."""
    preparer = node.started()
    shared = claim(new_uid(), "shared")
    shared["status"]["reservedFor"] = [
        {"resource": "pods", "name": "first", "uid": new_uid()},
        {"resource": "pods", "name": "second", "uid": new_uid()},
    ]
    ref = node.claims.add(shared)
    _, error = prepare_one(preparer, ref)
    assert error == (
        "the claim is reserved for pods first, second: with backend hami-core a claim serves "
        "one pod; give each pod a claim of its own (a ResourceClaimTemplate)"
    )
    assert not node.spec_path(ref.uid).exists()
    assert ref.uid not in preparer.prepared


def test_the_checkpoint_records_what_the_api_said_of_the_claim(node: Node) -> None:
    """Backend, isolation, priority, the pod and the card's share: what the monitor trusts."""
    preparer = node.started()
    one = claim(new_uid(), "c1", configs=[config("FromClaim", priority="offline")])
    one["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": new_uid()}]
    ref = node.claims.add(one)
    assert prepare_one(preparer, ref)[1] == ""
    share = preparer.prepared[ref.uid].share
    assert share is not None
    assert (share.backend, share.priority, share.pods) == (
        Backend.HAMI_CORE,
        Priority.OFFLINE,
        ("p",),
    )
    assert share.isolation is Isolation.BURST_SHARE
    assert [(card.uuid, card.cores) for card in share.cards] == [(CARDS[0].uuid, 30)]


def test_an_upgrade_from_0_1_0_keeps_every_prepared_claim_and_its_spec(node: Node) -> None:
    """A node whose checkpoint is 0.1.0's checkpoint.json keeps its claims across the upgrade."""
    preparer = node.started()
    refs = [node.claims.add(claim(new_uid(), f"c{i}")) for i in range(3)]
    answers = preparer.prepare(refs)
    specs = {ref.uid: node.spec_path(ref.uid).read_bytes() for ref in refs}
    # Turn the node into what release 0.1.0 left: one format-1 file, no checkpoint directory.
    claims = {uid: entry.to_json() for uid, entry in node.checkpoint().items()}
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
    document = {"checksum": hashlib.sha256(canonical.encode()).hexdigest(), "claims": claims}
    shutil.rmtree(node.paths.plugin_dir / "checkpoint")
    (node.paths.plugin_dir / "checkpoint.json").write_text(json.dumps({**document, "version": 1}))
    reads = len(node.claims.reads)
    with capture_logs() as logs:
        upgraded = node.started()
    assert [e["claims"] for e in logs if e["event"] == "checkpoint.migrated"] == [3]
    assert {ref.uid: node.spec_path(ref.uid).read_bytes() for ref in refs} == specs
    # The kubelet's prepare after the restart is answered from the checkpoint, as before.
    assert upgraded.prepare(refs) == answers
    assert len(node.claims.reads) == reads
    assert (node.paths.plugin_dir / "checkpoint.json.migrated").exists()
