"""The CDI spec model, its minimum cdiVersion, its validator and the atomic writer."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from cdi.factories import UID
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.cdi import (
    CdiDevice,
    CdiSpec,
    ContainerEdits,
    DeviceNode,
    Mount,
    atomic_write_json,
    canonical_json,
    required_version,
    validate_spec,
)
from dra_driver.cdi.spec import canonical_object

KIND = "k8s.gpushare.dra.dev/claim"
RW = ("rw", "nosuid", "nodev", "bind")
MOUNT_AB = {"hostPath": "/a", "containerPath": "/b"}


def spec(name: str = "gpu-0", node: DeviceNode | None = None, **kwargs: Any) -> CdiSpec:
    edits = ContainerEdits(env=("A=1",), device_nodes=(node or DeviceNode("/dev/nvidia0"),))
    return CdiSpec(kind=KIND, devices=(CdiDevice(name, edits),), **kwargs)


def good_doc() -> dict[str, Any]:
    return spec(
        name=f"{UID}-gpu-0",
        edits=ContainerEdits(
            env=("B=2",),
            device_nodes=(DeviceNode("/dev/nvidiactl", host_path="/run/nvidia/dev/nvidiactl"),),
            mounts=(Mount("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so"),),
        ),
    ).to_dict()


def test_to_dict_writes_cdi_field_names() -> None:
    """to_dict emits the CDI JSON object with CDI's field names and no empty lists."""
    doc = CdiSpec(
        kind=KIND,
        devices=(CdiDevice("gpu-0", ContainerEdits(env=("A=1",))),),
        edits=ContainerEdits(
            env=("B=2",),
            device_nodes=(DeviceNode("/dev/nvidiactl"),),
            mounts=(Mount("/h/lib.so", "/c/lib.so"), Mount("/h/dir", "/c/dir", RW)),
        ),
    ).to_dict()
    assert doc == {
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "devices": [{"name": "gpu-0", "containerEdits": {"env": ["A=1"]}}],
        "containerEdits": {
            "env": ["B=2"],
            "deviceNodes": [{"path": "/dev/nvidiactl", "permissions": "rw"}],
            "mounts": [
                {
                    "hostPath": "/h/lib.so",
                    "containerPath": "/c/lib.so",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                },
                {"hostPath": "/h/dir", "containerPath": "/c/dir", "options": list(RW)},
            ],
        },
    }
    assert list(doc) == ["cdiVersion", "kind", "devices", "containerEdits"]


@pytest.mark.parametrize("edits", [None, ContainerEdits()], ids=["none", "empty"])
def test_spec_level_edits_left_out_when_empty(edits: ContainerEdits | None) -> None:
    """A spec without claim-wide edits has no containerEdits key at all."""
    assert "containerEdits" not in spec(edits=edits).to_dict()


@pytest.mark.parametrize(
    ("built", "version"),
    [
        (spec(), "0.3.0"),
        (spec(node=DeviceNode("/dev/nvidia0", host_path="/run/nvidia/dev/nvidia0")), "0.5.0"),
        (
            spec(edits=ContainerEdits(device_nodes=(DeviceNode("/dev/x", host_path="/h/x"),))),
            "0.5.0",
        ),
        (spec(name=f"{UID}-gpu-0"), "0.5.0"),
        (spec(name="Gpu-0"), "0.3.0"),
    ],
    ids=["basic", "device-hostPath", "spec-hostPath", "digit-first-name", "letter-first-name"],
)
def test_to_dict_sets_the_minimum_cdi_version(built: CdiSpec, version: str) -> None:
    """cdiVersion is the lowest version with the features used: hostPath or a digit-led name."""
    assert built.to_dict()["cdiVersion"] == version


@pytest.mark.parametrize(
    ("change", "version"),
    [
        ({"containerEdits": {"mounts": [{**MOUNT_AB, "type": "bind"}]}}, "0.4.0"),
        ({"annotations": {"a": "b"}}, "0.6.0"),
        ({"kind": "k8s.gpushare.dra.dev/cl.aim"}, "0.6.0"),
        ({"containerEdits": {"additionalGids": [44]}}, "0.7.0"),
        ({"containerEdits": {"intelRdt": {"closID": "x"}}}, "0.7.0"),
        ({"containerEdits": {"netDevices": [{"hostInterfaceName": "a", "name": "b"}]}}, "1.1.0"),
    ],
    ids=["mount-type", "annotations", "dotted-class", "gids", "intel-rdt", "net-devices"],
)
def test_required_version_follows_cdi_rules(change: dict[str, Any], version: str) -> None:
    """required_version mirrors CDI's MinimumRequiredVersion for each feature."""
    doc = spec().to_dict() | change
    assert required_version(doc) == version


def test_merge_lets_later_edits_win_in_place() -> None:
    """merge keeps one entry per env name, node path and mount target: the later one."""
    first = ContainerEdits(
        env=("A=1", "B=2"),
        device_nodes=(DeviceNode("/dev/a"), DeviceNode("/dev/b")),
        mounts=(Mount("/h1", "/c"), Mount("/h2", "/d")),
    )
    second = ContainerEdits(
        env=("C=3", "A=9"),
        device_nodes=(DeviceNode("/dev/a", host_path="/x/dev/a"),),
        mounts=(Mount("/h3", "/c", RW),),
    )
    assert first.merge(second) == ContainerEdits(
        env=("A=9", "B=2", "C=3"),
        device_nodes=(DeviceNode("/dev/a", host_path="/x/dev/a"), DeviceNode("/dev/b")),
        mounts=(Mount("/h3", "/c", RW), Mount("/h2", "/d")),
    )
    assert ContainerEdits().merge(first) == first


def test_validate_spec_accepts_a_produced_spec() -> None:
    """A spec built by the model passes the validator."""
    assert validate_spec(good_doc()) == []


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: object) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()
DEV = ("devices", 0, "containerEdits")
D0 = "devices[0].containerEdits"
DN = f"{D0}.deviceNodes[0]"
M0 = "containerEdits.mounts[0]"
H0 = "containerEdits.hooks[0]"
VERSIONS = "must be one of 0.3.0, 0.4.0, 0.5.0, 0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0"
KIND_RULE = 'must start with a letter, end with a letter or digit, and hold only those and "_-."'
NAME_RULE = 'must hold only letters, digits and "_-.:", and start and end with a letter or digit'
ENV_NAME = "the name must match [A-Za-z_][A-Za-z0-9_]*"
HOOKS = "createContainer, createRuntime, poststart, poststop, prestart, startContainer"
DOTS = "must not contain a '..' segment"
MOUNT = ("containerEdits", "mounts", 0)
NODE = (*DEV, "deviceNodes", 0)

# (where in good_doc(), the value put there or _DELETE, the exact problems reported)
BAD_DOCS: list[tuple[tuple[Any, ...], object, list[str]]] = [
    (("cdiVersion",), "0.2.0", [f'cdiVersion: "0.2.0": {VERSIONS}']),
    (("cdiVersion",), _DELETE, [f"cdiVersion: None: {VERSIONS}"]),
    (("cdiVersion",), "0.3.0", ['cdiVersion: "0.3.0": the features used need 0.5.0']),
    (("kind",), "claim", ['kind: "claim": must be <vendor>/<class>']),
    (("kind",), "k8s.x-/claim", [f'kind: "k8s.x-/claim": the vendor "k8s.x-" {KIND_RULE}']),
    (
        ("kind",),
        "1k8s/cl aim",
        [
            f'kind: "1k8s/cl aim": the vendor "1k8s" {KIND_RULE}',
            f'kind: "1k8s/cl aim": the class "cl aim" {KIND_RULE}',
        ],
    ),
    (("kind",), 7, ["kind: must be a string <vendor>/<class>"]),
    (("extra",), 1, ['spec: unknown field "extra"']),
    (("devices",), [], ["devices: must be a non-empty list"]),
    (("devices", 0, "name"), "-gpu", [f'devices[0].name: "-gpu": {NAME_RULE}']),
    (("devices", 0, "name"), "gpu/0", [f'devices[0].name: "gpu/0": {NAME_RULE}']),
    (("devices", 0, "extra"), 1, ['devices[0]: unknown field "extra"']),
    (DEV, {}, [f"{D0}: a device must have at least one edit"]),
    ((*DEV, "bogus"), [], [f'{D0}: unknown field "bogus"']),
    ((*DEV, "env"), ["NOEQUALS"], [f'{D0}.env[0]: "NOEQUALS": must be KEY=VALUE']),
    ((*DEV, "env"), ["1A=x"], [f'{D0}.env[0]: "1A=x": {ENV_NAME}']),
    ((*DEV, "env"), ["=x"], [f'{D0}.env[0]: "=x": {ENV_NAME}']),
    ((*DEV, "env"), ["A-B=x"], [f'{D0}.env[0]: "A-B=x": {ENV_NAME}']),
    (
        (*DEV, "env"),
        ["A=x\ny"],
        [f'{D0}.env[0]: "A=x\\ny": the value must not contain control characters'],
    ),
    ((*DEV, "env"), ["A=1", "A=2"], [f'{D0}.env[1]: "A=2": A is set twice']),
    ((*DEV, "env"), [3], [f"{D0}.env[0]: must be a string KEY=VALUE"]),
    ((*DEV, "env"), "A=1", [f"{D0}.env: must be a list of strings"]),
    ((*NODE, "path"), "dev/x", [f'{DN}.path: "dev/x": must be an absolute path']),
    ((*NODE, "path"), "/dev/../etc", [f'{DN}.path: "/dev/../etc": {DOTS}']),
    ((*NODE, "path"), _DELETE, [f"{DN}.path: must be a non-empty string"]),
    (
        (*NODE, "hostPath"),
        "../x",
        [f'{DN}.hostPath: "../x": must be an absolute path', f'{DN}.hostPath: "../x": {DOTS}'],
    ),
    ((*NODE, "permissions"), "rwx", [f"{DN}.permissions: must be made of r, w and m, or be none"]),
    ((*NODE, "type"), "z", [f"{DN}.type: must be one of b, c, u, p"]),
    ((*NODE, "major"), -1, [f"{DN}.major: must be a non-negative integer"]),
    ((*NODE, "owner"), "root", [f'{DN}: unknown field "owner"']),
    (NODE, "/dev/nvidia0", [f"{DN}: must be an object"]),
    ((*DEV, "deviceNodes"), {}, [f"{D0}.deviceNodes: must be a list"]),
    ((*MOUNT, "containerPath"), "/c/../..", [f'{M0}.containerPath: "/c/../..": {DOTS}']),
    ((*MOUNT, "hostPath"), "lib.so", [f'{M0}.hostPath: "lib.so": must be an absolute path']),
    (
        (*MOUNT, "hostPath"),
        "/a\x00b",
        [f'{M0}.hostPath: "/a\\u0000b": must not contain control characters'],
    ),
    ((*MOUNT, "options"), ["ro", ""], [f"{M0}.options: must be a list of non-empty strings"]),
    ((*MOUNT, "readOnly"), True, [f'{M0}: unknown field "readOnly"']),
    (
        ("containerEdits", "hooks"),
        [{"hookName": "boot", "path": "/bin/x"}],
        [f"{H0}.hookName: must be one of {HOOKS}"],
    ),
    (
        ("containerEdits", "hooks"),
        [{"hookName": "poststop", "path": "x", "env": ["1=2"]}],
        [f'{H0}.path: "x": must be an absolute path', f'{H0}.env[0]: "1=2": {ENV_NAME}'],
    ),
    (("containerEdits",), [], ["containerEdits: must be an object"]),
]


@pytest.mark.parametrize(
    ("path", "value", "problems"), BAD_DOCS, ids=[str(i) for i in range(len(BAD_DOCS))]
)
def test_validate_spec_rejects_bad_docs(
    path: tuple[Any, ...], value: object, problems: list[str]
) -> None:
    """Each broken rule is reported with the path of the offending field and the rule."""
    assert validate_spec(_set(good_doc(), path, value)) == problems


def test_validate_spec_rejects_duplicate_devices_and_non_objects() -> None:
    """Two devices of one name, and documents that are not objects, are refused."""
    doc = good_doc()
    doc["devices"].append(copy.deepcopy(doc["devices"][0]))
    assert validate_spec(doc) == [f'devices[1].name: "{UID}-gpu-0": defined twice']
    assert validate_spec([]) == ["spec: must be an object"]
    assert validate_spec({**good_doc(), "devices": ["x"]}) == ["devices[0]: must be an object"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = ["cdiVersion", "kind", "devices", "containerEdits", "env", "deviceNodes", "mounts", "name"]
KEYS = st.sampled_from([*FIELDS, "path", "hostPath"])


@given(st.dictionaries(KEYS, JSON, max_size=5))
def test_validate_spec_never_raises(doc: dict[str, Any]) -> None:
    """Any JSON value in any field yields a list of problems, never an exception."""
    problems = validate_spec(doc)
    assert isinstance(problems, list)
    assert problems


def _temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_atomic_write_json_writes_the_document(tmp_path: Path) -> None:
    """The file holds the JSON document with the asked mode, and no temporary is left."""
    target = tmp_path / "k8s.gpushare.dra.dev-claim_x.json"
    atomic_write_json(target, good_doc())
    assert json.loads(target.read_text()) == good_doc()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    atomic_write_json(tmp_path / "checkpoint.json", {"a": 1}, mode=0o600)
    assert stat.S_IMODE((tmp_path / "checkpoint.json").stat().st_mode) == 0o600
    assert _temporaries(tmp_path) == []


def test_atomic_write_json_replaces_existing_content(tmp_path: Path) -> None:
    """A second write replaces the whole file; nothing of the longer old content remains."""
    target = tmp_path / "spec.json"
    atomic_write_json(target, {"old": "x" * 1000})
    atomic_write_json(target, {"new": 1})
    assert json.loads(target.read_text()) == {"new": 1}
    assert _temporaries(tmp_path) == []


def test_atomic_write_json_failure_before_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the process fails before the rename, the old file is intact and no temporary stays."""
    target = tmp_path / "spec.json"
    atomic_write_json(target, {"old": 1})

    def crash(source: str, destination: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_json(target, {"new": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"old": 1}
    assert _temporaries(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir()] == ["spec.json"]


def test_atomic_write_json_refuses_unencodable_documents(tmp_path: Path) -> None:
    """A document JSON cannot encode (NaN, objects) fails before the old file is touched."""
    target = tmp_path / "spec.json"
    atomic_write_json(target, {"old": 1})
    with pytest.raises(ValueError, match="Out of range float"):
        atomic_write_json(target, {"bad": float("nan")})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"bad": object()})
    assert json.loads(target.read_text()) == {"old": 1}
    assert _temporaries(tmp_path) == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=80, deadline=None)
@given(members=st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _JSON, max_size=6))
def test_an_object_of_canonical_members_is_the_canonical_json_of_the_object(
    members: dict[str, object],
) -> None:
    """Splicing members' canonical text gives exactly the canonical JSON of the whole object."""
    texts = {key: canonical_json(value) for key, value in members.items()}
    assert canonical_object(texts) == canonical_json(members)
