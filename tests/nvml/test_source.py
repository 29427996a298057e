"""The card-source interface and its fake: sorting, live re-reads, exact refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.nvml.fake import FakeCardSource
from dra_driver.nvml.inventory import Card, Health
from dra_driver.nvml.source import CardError, CardSource, Discovery, DiscoveryError

UUIDS = (
    "GPU-0efc110c-12c1-5f96-b4ff-304e5c339d3c",
    "GPU-26975e32-62e5-543b-ac29-e97c231c6291",
    "GPU-5f6e2bd7-0b6c-4d21-9d2e-3a8f3c1e7a01",
    "GPU-7a1c2e3f-4b5d-4e6f-8a9b-0c1d2e3f4a5b",
)
MEMORY_RULE = (
    "expected a memory size: a whole number of bytes from 1 to 2^63-1, or a whole number with a "
    "binary suffix Ki, Mi, Gi or Ti such as 80Gi (decimal suffixes such as G are ambiguous and "
    "refused)"
)


def card_yaml(index: int, uuid: str, bus: str, *, memory: str = "80Gi", extra: str = "") -> str:
    return (
        f"    - {{uuid: {uuid}, productName: NVIDIA A100-SXM4-80GB, memory: {memory}, "
        f'pciBusID: "{bus}", minor: {index}, index: {index}, architecture: Ampere, '
        f'cudaComputeCapability: "8.0", driverVersion: "550.54.15"{extra}}}\n'
    )


def inventory_yaml(*, node_a_extra: str = "", memory: str = "80Gi") -> str:
    """node-a: three cards whose NVML order differs from their bus order; node-b: one card."""
    return (
        "nodes:\n"
        "- name: node-a\n"
        "  cards:\n"
        + card_yaml(0, UUIDS[0], "0000:b1:00.0", memory=memory)
        + card_yaml(1, UUIDS[1], "0000:3b:00.0", extra=node_a_extra)
        + card_yaml(2, UUIDS[2], "0000:5e:00.0")
        + "- name: node-b\n"
        "  cards:\n" + card_yaml(0, UUIDS[3], "0000:07:00.0")
    )


@pytest.fixture
def inventory_file(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(inventory_yaml())
    return path


def test_fake_source_returns_the_nodes_cards_sorted_by_bus_id(inventory_file: Path) -> None:
    """discover() returns only this node's cards, ordered by PCI bus ID, not by NVML index."""
    source = FakeCardSource(inventory_file, "node-a")
    source.start()
    discovery = source.discover()
    source.stop()
    assert [card.pci_bus_id for card in discovery.cards] == [
        "0000:3b:00.0",
        "0000:5e:00.0",
        "0000:b1:00.0",
    ]
    assert [card.index for card in discovery.cards] == [1, 2, 0]
    assert discovery.errors == ()
    assert all(card.health is Health.HEALTHY for card in discovery.cards)
    assert source.version() == "fake"


def test_fake_source_satisfies_the_card_source_protocol(inventory_file: Path) -> None:
    """FakeCardSource is usable wherever the plugin expects a CardSource."""
    source: CardSource = FakeCardSource(inventory_file, "node-b")
    assert [card.uuid for card in source.discover().cards] == [UUIDS[3]]


def test_fake_source_sees_edits_on_the_next_discover(inventory_file: Path) -> None:
    """Rewriting the file changes the next discovery: a card goes Unhealthy, a card vanishes."""
    source = FakeCardSource(inventory_file, "node-a")
    assert {card.health for card in source.discover().cards} == {Health.HEALTHY}

    unhealthy = ", health: Unhealthy, healthMessage: XID 79 (GPU has fallen off the bus)"
    inventory_file.write_text(inventory_yaml(node_a_extra=unhealthy))
    sick = [card for card in source.discover().cards if card.health is Health.UNHEALTHY]
    assert [(card.uuid, card.health_message) for card in sick] == [
        (UUIDS[1], "XID 79 (GPU has fallen off the bus)")
    ]

    inventory_file.write_text(
        "nodes:\n- name: node-a\n  cards:\n" + card_yaml(0, UUIDS[2], "0000:5e:00.0")
    )
    assert [card.uuid for card in source.discover().cards] == [UUIDS[2]]


def test_fake_source_parses_an_unchanged_file_once(
    inventory_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repeated discoveries of an unchanged file parse it once; a rewrite is parsed again."""
    from dra_driver.nvml import fake  # noqa: PLC0415 - the module whose loader is counted

    parses: list[Path] = []
    real = fake.load_inventory
    monkeypatch.setattr(fake, "load_inventory", lambda path: parses.append(path) or real(path))
    source = FakeCardSource(inventory_file, "node-a")
    first = source.discover()
    assert source.discover() == first
    assert len(parses) == 1
    inventory_file.write_text(inventory_yaml(node_a_extra=", health: Unhealthy"))
    assert source.discover() != first
    assert len(parses) == 2


def test_fake_source_refuses_an_unknown_node_naming_the_files_nodes(inventory_file: Path) -> None:
    """An unknown node is a DiscoveryError naming the node and the nodes the file has."""
    source = FakeCardSource(inventory_file, "node-z")
    with pytest.raises(DiscoveryError) as caught:
        source.discover()
    assert str(caught.value) == (
        f"{inventory_file}: no node 'node-z' in the inventory; its nodes are: node-a, node-b"
    )


def test_fake_source_start_fails_fast_on_a_wrong_node_or_file(
    inventory_file: Path, tmp_path: Path
) -> None:
    """start() raises the same DiscoveryError as discover(), so misconfiguration stops start-up."""
    with pytest.raises(DiscoveryError, match=r"no node 'node-z' in the inventory"):
        FakeCardSource(inventory_file, "node-z").start()
    with pytest.raises(DiscoveryError, match=r"cannot read: No such file or directory$"):
        FakeCardSource(tmp_path / "absent.yaml", "node-a").start()


def test_fake_source_shortens_a_long_node_list(tmp_path: Path) -> None:
    """With more than ten nodes the message names the first ten and the total."""
    path = tmp_path / "many.yaml"
    path.write_text(
        "generate: {nodes: 12, namePrefix: gpu-, cardsPerNode: 1, card: {productName: Tesla T4, "
        "memory: 15Gi, architecture: Turing, cudaComputeCapability: '7.5', "
        "driverVersion: '535.161.08'}}\n"
    )
    with pytest.raises(DiscoveryError) as caught:
        FakeCardSource(path, "gpu-13").discover()
    names = ", ".join(f"gpu-{i}" for i in range(1, 11))
    assert str(caught.value) == (
        f"{path}: no node 'gpu-13' in the inventory; its nodes are: {names}, ... (12 nodes)"
    )


def test_fake_source_reports_a_missing_file_with_the_inventory_message(tmp_path: Path) -> None:
    """A file that cannot be read is a DiscoveryError carrying the InventoryError's message."""
    path = tmp_path / "absent.yaml"
    with pytest.raises(DiscoveryError) as caught:
        FakeCardSource(path, "node-a").discover()
    assert str(caught.value) == f"{path}: cannot read: No such file or directory"


def test_fake_source_reports_an_invalid_file_with_the_inventory_message(
    inventory_file: Path,
) -> None:
    """A file that no longer decodes is a DiscoveryError with the exact InventoryError text."""
    source = FakeCardSource(inventory_file, "node-a")
    source.discover()
    inventory_file.write_text(inventory_yaml(memory="80GB"))
    with pytest.raises(DiscoveryError) as caught:
        source.discover()
    assert str(caught.value) == (
        f'{inventory_file}: nodes[0].cards[0].memory: {MEMORY_RULE}, got the string "80GB"'
    )


def test_discovery_sorts_cards_by_bus_id_whatever_the_source() -> None:
    """Discovery itself orders cards by PCI bus ID, so no source can hand them out of order."""

    def card(index: int, bus: str) -> Card:
        return Card(
            uuid=UUIDS[index],
            product_name="NVIDIA H100 80GB HBM3",
            memory_bytes=80 * 2**30,
            pci_bus_id=bus,
            minor=index,
            index=index,
            architecture="Hopper",
            cuda_compute_capability="9.0",
            driver_version="550.54.15",
        )

    discovery = Discovery(cards=(card(0, "00000000:DB:00.0"), card(1, "0000:1a:00.0")))
    assert [c.pci_bus_id for c in discovery.cards] == ["0000:1a:00.0", "0000:db:00.0"]
    assert discovery.errors == ()


def test_card_error_reads_as_card_index_uuid_and_message() -> None:
    """A CardError's text names the card by index and, when known, UUID."""
    assert str(CardError(1, UUIDS[1], "nvmlDeviceGetName failed: GPU is lost")) == (
        f"card 1 ({UUIDS[1]}): nvmlDeviceGetName failed: GPU is lost"
    )
    assert str(CardError(2, None, "x")) == "card 2: x"
    assert str(CardError(None, None, "x")) == "card ?: x"
