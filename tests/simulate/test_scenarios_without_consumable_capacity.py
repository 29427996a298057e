"""The eight scenarios on an API server without consumable capacity (Kubernetes 1.34/1.35)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gpushare_simulator.simulate.checks import Refused
from gpushare_simulator.simulate.command import examples_dir
from gpushare_simulator.simulate.manifests import load_manifest
from gpushare_simulator.simulate.runner import Runner, ScenarioReport
from gpushare_simulator.simulate.scenarios import BAD_INPUT, SCENARIOS, SHARING, Scenario
from gpushare_simulator.simulate.sizes import sized_run
from gpushare_simulator.simulate.stack import Stack
from kubernetes import client
from simulate.kit import NAMES

from dra_driver.controller.settings import ControllerSettings
from dra_driver.k8s import raw
from dra_driver.nvml.inventory import builtin_inventory


@pytest.fixture(scope="module")
def plain_stack() -> Iterator[Stack]:
    """Yield the simulated cluster with DRAConsumableCapacity off, stopped after."""
    inventory = builtin_inventory("qgpu-runbook")
    settings = ControllerSettings(leader_elect=False)
    with Stack(NAMES, inventory, settings, consumable_capacity=False) as stack:
        yield stack


def run(stack: Stack, scenario: Scenario) -> ScenarioReport:
    """Run one scenario with its manifest sized by config; fail with its failures."""
    adapted, manifest = sized_run(
        scenario, load_manifest(examples_dir() / scenario.manifest), NAMES
    )
    assert adapted is not None
    runner = Runner(stack, NAMES, lambda _: None)
    report = runner.run(adapted, manifest, scenario.name)
    assert report.passed, [f for step in report.steps for f in step.failures]
    return report


def test_the_plugins_publish_whole_only_cards(plain_stack: Stack) -> None:
    """Every published card lacks allowMultipleAllocations: the API server dropped it."""
    slices = raw.call(client.ResourceV1Api(plain_stack.cluster.api).list_resource_slice)
    devices = [d for s in slices["items"] for d in s["spec"].get("devices") or []]
    assert devices
    assert not any(d.get("allowMultipleAllocations") for d in devices)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_scenario_passes_with_config_sizes(plain_stack: Stack, scenario: Scenario) -> None:
    """Each scenario's expectations hold when its shares are sized by GpuShareConfig."""
    run(plain_stack, scenario)


def test_shares_run_together_on_one_whole_only_card(plain_stack: Stack) -> None:
    """The sharing scenario's two pods hold one plain card, each with its own config size."""
    report = run(plain_stack, SHARING)
    snapshot = report.steps[0].snapshot
    (used,) = (use for use in snapshot.cards if use.shares)
    assert (len(used.shares), used.whole, used.cores_used, used.memory_used) == (
        2,
        False,
        70,
        10 * 2**30,
    )
    sizes = sorted((share.cores, share.memory) for pod in snapshot.pods for share in pod.shares)
    assert sizes == [(30, 5 * 2**30), (40, 5 * 2**30)]


def test_the_memory_refusal_names_the_config_field() -> None:
    """bad-input's too-much-memory refusal is expected at the config's memory field."""
    adapted, _ = sized_run(BAD_INPUT, load_manifest(examples_dir() / BAD_INPUT.manifest), NAMES)
    assert adapted is not None
    fields = {
        c.document: c.field for s in adapted.steps for c in s.checks if isinstance(c, Refused)
    }
    assert fields["ResourceClaimTemplate/too-much-memory"] == (
        "spec.spec.devices.config[0].opaque.parameters.memory"
    )
    assert fields["ResourceClaim/bad-isolation"] == (
        "spec.devices.config[0].opaque.parameters.isolation"
    )
