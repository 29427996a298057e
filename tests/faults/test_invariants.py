"""Each invariant catches the broken state it exists for (so a clean run means something)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpushare_simulator.harness import invariants
from gpushare_simulator.harness.invariants import NodeFiles

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.cdi import spec_file_name

NAMES = DriverNames.for_driver(DEFAULT_DRIVER_NAME)
DRIVER = NAMES.driver
UID_A = "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0"
UID_B = "1a2b3c4d-5e6f-4a0b-8c1d-2e3f4a5b6c7d"
Object = dict[str, Any]


def slice_of(pool: str, *devices: str) -> Object:
    return {
        "spec": {
            "driver": DRIVER,
            "pool": {"name": pool},
            "devices": [
                {
                    "name": d,
                    "capacity": {"cores": {"value": "100"}, "memory": {"value": "16Gi"}},
                }
                for d in devices
            ],
        }
    }


def claim(name: str, uid: str, *results: Object, finalizer: bool = True) -> Object:
    metadata: Object = {"name": name, "namespace": "default", "uid": uid}
    if finalizer:
        metadata["finalizers"] = [NAMES.finalizer]
    made: Object = {"metadata": metadata}
    if results:
        made["status"] = {"allocation": {"devices": {"results": list(results)}}}
    return made


def share(device: str, share_id: str, cores: str, memory: str = "1Gi") -> Object:
    return {
        "request": "gpu", "driver": DRIVER, "pool": "n1", "device": device,
        "shareID": share_id, "consumedCapacity": {"cores": cores, "memory": memory},
    }  # fmt: skip


def whole(device: str) -> Object:
    return {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": device}


def test_shares_within_the_card_pass_and_one_core_too_many_fails() -> None:
    """60 + 40 cores fit a 100-core card; 60 + 41 is reported with the capacity."""
    slices = [slice_of("n1", "gpu-0")]
    fine = [
        claim("a", UID_A, share("gpu-0", "s1", "60")),
        claim("b", UID_B, share("gpu-0", "s2", "40")),
    ]
    over = [
        claim("a", UID_A, share("gpu-0", "s1", "60")),
        claim("b", UID_B, share("gpu-0", "s2", "41")),
    ]
    assert invariants.overcommitted(fine, slices, DRIVER) == []
    assert invariants.overcommitted(over, slices, DRIVER) == [
        "card n1/gpu-0 is over-committed: cores 101 > 100"
    ]


def sized(name: str, uid: str, cores: str) -> Object:
    """Return a claim allocated n1/gpu-0 without a share, its config giving cores and 1Gi."""
    parameters = {"apiVersion": NAMES.config_api_version, "kind": NAMES.config_kind}
    entry = {"opaque": {"driver": DRIVER, "parameters": parameters | {"cores": cores}}}
    entry["opaque"]["parameters"]["memory"] = "1Gi"
    made = claim(name, uid, whole("gpu-0"))
    made["status"]["allocation"]["devices"]["config"] = [{"source": "FromClaim", **entry}]
    return made


def test_config_sized_shares_on_a_plain_card_are_summed_like_shares() -> None:
    """60 + 40 config cores on one whole-only card pass; 60 + 41 is caught like any share."""
    slices = [slice_of("n1", "gpu-0")]
    fine = [sized("a", UID_A, "60"), sized("b", UID_B, "40")]
    over = [sized("a", UID_A, "60"), sized("b", UID_B, "41")]
    assert invariants.overcommitted(fine, slices, DRIVER) == []
    assert invariants.overcommitted(over, slices, DRIVER) == [
        "card n1/gpu-0 is over-committed: cores 101 > 100"
    ]


def test_a_card_used_whole_and_shared_is_caught() -> None:
    """A result without a shareID takes the card: any other holder is a violation."""
    claims = [claim("a", UID_A, whole("gpu-0")), claim("b", UID_B, share("gpu-0", "s1", "0", "0"))]
    assert invariants.overcommitted(claims, [slice_of("n1", "gpu-0")], DRIVER) == [
        "card n1/gpu-0 is used whole and shared: default/a, default/b"
    ]


def test_one_share_in_two_claims_is_caught() -> None:
    """The same device and shareID in two claims is a double allocation."""
    claims = [
        claim("a", UID_A, share("gpu-0", "s1", "10")),
        claim("b", UID_B, share("gpu-0", "s1", "10")),
    ]
    assert invariants.allocated_twice(claims, DRIVER) == [
        "share s1 of card n1/gpu-0 is allocated to default/a, default/b"
    ]
    assert invariants.allocated_twice(claims[:1], DRIVER) == []


def test_finalizer_missing_on_an_allocated_claim_or_left_on_a_released_one() -> None:
    """Allocated without the finalizer, or released with it: both are reported."""
    claims = [
        claim("kept", UID_A, share("gpu-0", "s1", "10")),
        claim("bare", UID_B, share("gpu-1", "s2", "10"), finalizer=False),
        claim("released", "uid-c"),
        claim("clean", "uid-d", finalizer=False),
    ]
    assert invariants.finalizers(claims, NAMES) == [
        f"claim default/bare is allocated without {NAMES.finalizer}",
        f"claim default/released is released but keeps {NAMES.finalizer}",
    ]


def running_pod(node: str, claim_name: str) -> Object:
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": node},
        "status": {
            "phase": "Running",
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_name}],
        },
    }


def test_a_running_pod_must_be_prepared_once_on_its_own_node() -> None:
    """Prepared on its node passes; a copy on another node, or a half-done entry, fails."""
    spec = spec_file_name(NAMES, UID_A)
    claims = [claim("a", UID_A, share("gpu-0", "s1", "10"))]
    pods = [running_pod("n1", "a")]
    good = NodeFiles(frozenset({spec}), {UID_A: ("PrepareCompleted", spec)})
    empty = NodeFiles(frozenset(), {})
    half = NodeFiles(frozenset({spec}), {UID_A: ("PrepareStarted", spec)})
    assert invariants.prepared_once(pods, claims, {"n1": good, "n2": empty}, NAMES) == []
    assert invariants.prepared_once(pods, claims, {"n1": good, "n2": good}, NAMES)
    assert invariants.prepared_once(pods, claims, {"n1": half, "n2": empty}, NAMES)
    assert invariants.prepared_once(pods, claims, {"n1": empty, "n2": empty}, NAMES)


def test_specs_and_checkpoint_entries_must_name_the_same_claims() -> None:
    """A stray spec, an entry without its spec, and an unfinished entry are all reported."""
    spec_a, spec_b = spec_file_name(NAMES, UID_A), spec_file_name(NAMES, UID_B)
    files = NodeFiles(
        frozenset({spec_a, "k8s.gpushare.dra.dev-claim_stray.json"}),
        {UID_A: ("PrepareCompleted", spec_a), UID_B: ("PrepareStarted", spec_b)},
    )
    assert invariants.specs_match_checkpoint({"n1": files}) == [
        "n1: CDI spec k8s.gpushare.dra.dev-claim_stray.json has no checkpoint entry",
        f"n1: checkpoint entry {UID_B} has no CDI spec {spec_b}",
        f"n1: checkpoint entry {UID_B} is left in PrepareStarted",
    ]


def test_node_files_reads_what_the_plugin_writes(tmp_path: Path) -> None:
    """Spec files of this driver and every entry of each checkpoint file are read from disk."""
    cdi, plugin = tmp_path / "cdi", tmp_path / "plugin"
    cdi.mkdir()
    plugin.mkdir()
    spec = spec_file_name(NAMES, UID_A)
    (cdi / spec).write_text("{}")
    (cdi / "other-vendor_x.json").write_text("{}")
    spec_b = spec_file_name(NAMES, UID_B)
    batch = [
        {"uid": UID_A, "state": "PrepareCompleted", "spec_file": spec},
        {"uid": UID_B, "state": "PrepareStarted", "spec_file": spec_b},
    ]
    (checkpoint := plugin / "checkpoint").mkdir()
    (checkpoint / f"{UID_A}.json").write_text(json.dumps({"claims": batch, "version": 2}))
    files = invariants.node_files(cdi, plugin, NAMES)
    assert files == NodeFiles(
        frozenset({spec}), {UID_A: ("PrepareCompleted", spec), UID_B: ("PrepareStarted", spec_b)}
    )
