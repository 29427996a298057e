"""Property: for any valid claim the produced CDI spec is valid and keyed by PCI order."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cdi.factories import GIB, HOST, MIB, card, config, share
from hypothesis import event, given, settings
from hypothesis import strategies as st

from dra_driver.api import Backend, DriverNames, Isolation, Priority
from dra_driver.cdi import (
    CardShare,
    CdiDevice,
    CdiSpec,
    ContainerEdits,
    UnsupportedPolicyError,
    build_edits,
    cdi_device_name,
    validate_spec,
)

NAMES = DriverNames.for_driver("gpushare.dra.dev")


@st.composite
def claims(draw: st.DrawFn) -> tuple[str, list[CardShare], Isolation, Priority, Backend, Path]:
    count = draw(st.integers(1, 4))
    buses = draw(st.lists(st.integers(0, 255), min_size=count, max_size=count, unique=True))
    cards = [card(i, bus, memory=draw(st.integers(1, 80)) * GIB) for i, bus in enumerate(buses)]
    isolation = draw(st.sampled_from(list(Isolation)))
    picks = draw(st.lists(st.sampled_from(cards), min_size=1, max_size=5))
    shares = []
    for picked in picks:
        whole = isolation is Isolation.EXCLUSIVE
        cores = 100 if whole else draw(st.integers(0, 100))
        memory = (
            picked.memory_bytes if whole else draw(st.integers(1, picked.memory_bytes // MIB)) * MIB
        )
        share_id = str(draw(st.uuids())) if picks.count(picked) > 1 or draw(st.booleans()) else None
        shares.append(share(picked, cores, memory, share_id))
    uid = str(draw(st.uuids()))
    priority = draw(st.sampled_from(list(Priority)))
    backend = draw(st.sampled_from(list(Backend)))
    root = draw(st.sampled_from([Path("/"), Path("/run/nvidia/driver")]))
    return uid, shares, isolation, priority, backend, root


def assemble(uid: str, shares: list[CardShare], edits: ContainerEdits) -> CdiSpec:
    """Build the spec as the kubelet plugin does: one device per share, claim edits at top."""
    devices = tuple(
        CdiDevice(
            cdi_device_name(uid, f"gpu-{s.card.index}", s.share_id),
            ContainerEdits(env=(f"GPUSHARE_SHARE_{i}={s.share_id or 'whole-card'}",)),
        )
        for i, s in enumerate(shares)
    )
    return CdiSpec(kind=NAMES.cdi_kind, devices=devices, edits=edits)


@settings(max_examples=300)
@given(claims())
def test_produced_specs_always_validate(
    claim: tuple[str, list[CardShare], Isolation, Priority, Backend, Path],
) -> None:
    """Any accepted claim yields a spec validate_spec passes, with limits in PCI bus order."""
    uid, shares, isolation, priority, backend, root = claim
    host = dataclasses.replace(HOST, driver_root=root)
    try:
        edits = build_edits(uid, shares, config(isolation, priority, backend), host)
    except UnsupportedPolicyError as refused:
        message = str(refused)
    else:
        message = ""
    if message:
        event(f"refused: {backend} {isolation}")
        assert message.startswith(f'backend "{backend}": ')
        return
    event(f"built: {backend}")
    doc = assemble(uid, shares, edits).to_dict()
    assert validate_spec(doc) == []
    cards = sorted({s.card.pci_bus_id: s.card for s in shares}.items())
    env = dict(entry.split("=", 1) for entry in edits.env)
    assert env["GPUSHARE_DEVICE_UUIDS"] == ",".join(c.uuid for _, c in cards)
    for ordinal, (bus, of) in enumerate(cards):
        cores = min(100, sum(s.cores for s in shares if s.card.pci_bus_id == bus))
        assert env[f"GPUSHARE_CORES_{ordinal}"] == str(cores)
        if backend is Backend.HAMI_CORE:
            assert env[f"CUDA_DEVICE_SM_LIMIT_{ordinal}"] == str(cores)
        assert edits.device_nodes[ordinal].path == f"/dev/nvidia{of.minor}"
    assert f"GPUSHARE_CORES_{len(cards)}" not in env
