"""The bad-input corpus (tests/data/bad-inputs) and the judges that must refuse each entry.

An entry is one YAML file: ``description``, ``judge``, ``object`` (and for some judges
``classes``), and ``error``: the exact message, or the exact list of messages. Judges send the
object down the real path that refuses it in production:

- ``webhook``: a ResourceClaim or ResourceClaimTemplate through the admission webhook's checks;
- ``config``: GpuShareConfig ``parameters`` through the decoder every component uses;
- ``plugin``: an allocated claim through the kubelet plugin's NodePrepareResources, on a node
  that already has a good claim prepared (whose files must not change);
- ``controller-class``: a DeviceClass, asked for by a claim, through the allocation engine;
- ``controller-slice``: a ResourceSlice through the engine's snapshot (it is left out, and
  said so, while the good slices still count).
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any, Final

import yaml
from kubeletplugin.test_state import CARDS, NODE, FakeClaims, Node, result
from webhook.kit import LIMITS, classes

from dra_driver.api import DEFAULT_DRIVER_NAME, Backend, ConfigError, DriverNames, decode_config
from dra_driver.api.classes import default_device_classes
from dra_driver.engine import Policy, Snapshot, Unplaceable, place_pod
from dra_driver.kubeletplugin.entries import ClaimRef
from dra_driver.kubeletplugin.paths import NodePaths
from dra_driver.kubeletplugin.state import ClaimPreparer
from dra_driver.nvml.inventory import NodeInventory
from dra_driver.plan.inventory import node_object
from dra_driver.publishing.slices import desired_slices
from dra_driver.publishing.slicesync import with_generation
from dra_driver.validation.claimspec import validate_claim_spec

Object = dict[str, Any]

NAMES: Final = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
CORPUS: Final = Path(__file__).resolve().parents[1] / "data" / "bad-inputs"
JUDGES: Final = ("webhook", "config", "plugin", "controller-class", "controller-slice")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One corpus file."""

    path: Path
    description: str
    judge: str
    object: Any
    error: list[str]
    classes: list[Object]


def load(path: Path) -> Entry:
    """Read one corpus file; a missing key is a KeyError naming it."""
    document = yaml.safe_load(path.read_text())
    error = document["error"]
    return Entry(
        path=path,
        description=document["description"],
        judge=document["judge"],
        object=document["object"],
        error=error if isinstance(error, list) else [error],
        classes=list(document.get("classes") or []),
    )


def corpus() -> list[Path]:
    """Every corpus file, in a stable order."""
    return sorted(CORPUS.rglob("*.yaml"))


def plugin_node(root: Path) -> tuple[Node, ClaimPreparer, ClaimRef]:
    """Return a plugin node with one good claim prepared, its preparer and that claim."""
    node = Node(
        root=root,
        paths=NodePaths(
            plugin_dir=root / "var" / "plugins" / NAMES.driver,
            cdi_root=root / "var" / "run" / "cdi",
            driver_root=Path("/"),
            hami_core_library=root / "lib" / "libvgpu.so",
            mps_pipe_directory=root / "mps",
        ),
        claims=FakeClaims(),
    )
    preparer = node.started(Backend.HAMI_CORE)
    good = _claim_object(str(uuid.uuid4()), "good", [result()])
    ref = node.claims.add(good)
    (outcome,) = preparer.prepare([ref]).values()
    if outcome.error:
        raise AssertionError(f"the good claim was refused: {outcome.error}")
    return node, preparer, ref


def _claim_object(uid: str, name: str, results: list[Object]) -> Object:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def verdict(  # noqa: PLR0911 - one return per judge
    entry: Entry, node: tuple[Node, ClaimPreparer, ClaimRef] | None = None
) -> list[str]:
    """Send the entry to its judge; return the messages it answered (empty: accepted)."""
    if entry.judge == "webhook":
        known = {**classes(), **{c["metadata"]["name"]: c for c in entry.classes}}
        kind = entry.object.get("kind")
        spec = entry.object.get("spec") or {}
        if kind == "ResourceClaimTemplate":
            return validate_claim_spec(
                spec.get("spec") or {}, path="spec.spec", names=NAMES, classes=known, limits=LIMITS
            )
        return validate_claim_spec(spec, path="spec", names=NAMES, classes=known, limits=LIMITS)
    if entry.judge == "config":
        try:
            decode_config(entry.object, NAMES)
        except ConfigError as exc:
            return [str(exc)]
        return []
    if entry.judge == "plugin":
        if node is None:
            raise ValueError("the plugin judge needs a node")
        claims, preparer = node[0].claims, node[1]
        metadata = entry.object["metadata"]
        ref = ClaimRef(metadata["namespace"], metadata["uid"], metadata["name"])
        claims.objects[(ref.namespace, ref.name)] = entry.object
        try:
            error = preparer.prepare([ref])[ref.uid].error
        finally:
            del claims.objects[(ref.namespace, ref.name)]
        return [error] if error else []
    if entry.judge == "controller-class":
        return _class_verdict(entry.object)
    if entry.judge == "controller-slice":
        return _slice_verdict(entry.object)
    raise ValueError(f"unknown judge {entry.judge!r}; known: {', '.join(JUDGES)}")


def _node_inventory() -> NodeInventory:
    return NodeInventory(name=NODE, cards=CARDS)


def _good_slices() -> list[Object]:
    made = desired_slices(NAMES, NODE, "uid-node", CARDS)
    return [
        {**with_generation(s, 1), "metadata": {"name": f"good-{i}"}} for i, s in enumerate(made)
    ]


def _class_verdict(device_class: Object) -> list[str]:
    snapshot = Snapshot.build(
        NAMES,
        nodes=[node_object(_node_inventory())],
        slices=_good_slices(),
        classes=[*default_device_classes(NAMES), device_class],
        claims=[],
    )
    name = device_class["metadata"]["name"]
    request = {"name": "gpu", "exactly": {"deviceClassName": name}}
    claim = {
        "metadata": {"name": "c", "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {"devices": {"requests": [request]}},
    }
    decision = place_pod(snapshot, {"metadata": {"name": "p"}, "spec": {}}, [claim], Policy())
    return [decision.reason] if isinstance(decision, Unplaceable) else []


def _slice_verdict(slice_: Object) -> list[str]:
    snapshot = Snapshot.build(
        NAMES,
        nodes=[node_object(_node_inventory())],
        slices=[*_good_slices(), slice_],
        classes=default_device_classes(NAMES),
        claims=[],
    )
    # Only a pool judged invalid or incomplete may take the good cards with it.
    if len(snapshot.devices.get(NODE, ())) != len(CARDS) and not snapshot.unusable_pools:
        return ["the good slices stopped counting"]
    return list(snapshot.problems)
