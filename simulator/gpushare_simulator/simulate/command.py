"""``gpushare-dra simulate``: read the inputs, run the stack, report, and choose the exit status.

Exit status: 0 when every scenario's expectations held (or ``--apply`` ran), 1 when one
failed or the simulated cluster itself failed, 2 for unusable input (an unknown inventory, a
manifest that cannot be read), 130 when interrupted. Bad input is refused before anything
starts; whatever started is stopped and its temporary directory removed on every path out.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Final, TextIO

from dra_driver.api import DriverNames, Placement
from dra_driver.controller.settings import ControllerSettings
from dra_driver.k8s.errors import ApiError
from dra_driver.nvml.inventory import Inventory
from dra_driver.plan.errors import PlanInputError
from dra_driver.plan.inventory import read_inventory
from gpushare_simulator.harness import kubebin
from gpushare_simulator.harness.controlplane import ControlPlaneError
from gpushare_simulator.harness.kubebin import KubeBinaries
from gpushare_simulator.settings import SimulateSettings
from gpushare_simulator.simulate.manifests import Manifest, ManifestError, load_manifest
from gpushare_simulator.simulate.progress import Progress
from gpushare_simulator.simulate.render import render_document, render_table
from gpushare_simulator.simulate.runner import Runner, ScenarioReport, SimulationError
from gpushare_simulator.simulate.scenarios import SCENARIOS, Scenario
from gpushare_simulator.simulate.sizes import sized_run
from gpushare_simulator.simulate.stack import Stack, StackError

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130

_PACKAGE: Final = Path(__file__).resolve().parent
# Installed wheels carry the examples inside the package (see pyproject.toml); a source
# checkout has them where people look for them.
_EXAMPLE_DIRS: Final = (_PACKAGE / "examples", _PACKAGE.parents[2] / "deploy" / "examples")
EXAMPLES_LABEL: Final = "deploy/examples"


class InputError(Exception):
    """The command line or a file it names cannot be used."""


def examples_dir() -> Path:
    """Return the directory holding the scenarios' manifests."""
    for directory in _EXAMPLE_DIRS:
        if directory.is_dir():
            return directory
    raise InputError(
        f"the example manifests are missing: looked in {', '.join(map(str, _EXAMPLE_DIRS))}"
    )


def controller_settings(settings: SimulateSettings) -> ControllerSettings:
    """Return the controller's settings: leader election off, placement from ``--policy``."""
    if settings.policy is None:
        return ControllerSettings(leader_elect=False)
    placement = Placement(settings.policy)
    return ControllerSettings(
        leader_elect=False,
        gpu_placement_online=placement,
        gpu_placement_offline=placement,
        node_placement=placement,
    )


def _inputs(
    settings: SimulateSettings, examples: Path | None
) -> tuple[Inventory, str, list[tuple[Scenario | None, Manifest]]]:
    if settings.apply is not None and settings.scenario is not None:
        raise InputError("give --scenario or --apply, not both")
    try:
        inventory, description = read_inventory(settings.inventory)
        if settings.apply is not None:
            return inventory, description, [(None, load_manifest(settings.apply))]
        wanted = settings.scenario or "all"
        chosen = [s for s in SCENARIOS if wanted in ("all", s.name)]
        directory = examples or examples_dir()
        runs: list[tuple[Scenario | None, Manifest]] = []
        for scenario in chosen:
            manifest = load_manifest(directory / scenario.manifest)
            label = f"{EXAMPLES_LABEL}/{scenario.manifest}"
            runs.append((scenario, Manifest(label, manifest.documents)))
    except (PlanInputError, ManifestError) as exc:
        raise InputError(str(exc)) from None
    return inventory, description, runs


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C, so a killed run still stops everything and cleans up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001 - signal API
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(
    names: DriverNames,
    settings: SimulateSettings,
    stdout: TextIO,
    stderr: TextIO,
    *,
    binaries: KubeBinaries | None = None,
    examples: Path | None = None,
) -> int:
    """Run the simulation and print its report; return the exit status."""
    try:
        inventory, description, runs = _inputs(settings, examples)
        if not settings.consumable_capacity:
            # The built-in examples are rewritten as such a cluster needs them; a file given
            # with --apply is applied as written, so what the webhook refuses there shows.
            runs = [
                sized_run(scenario, manifest, names) if scenario is not None else (None, manifest)
                for scenario, manifest in runs
            ]
            applied = any(scenario is None for scenario, _ in runs)
            description += (
                ", without consumable capacity: applied as written (capacity requests are "
                "refused, as on 1.34/1.35)"
                if applied
                else ", without consumable capacity: the examples' capacity requests moved "
                "into GpuShareConfig cores/memory"
            )
        if binaries is None and settings.kube_binaries is not None:
            binaries = kubebin.prepare(settings.kube_binaries.expanduser())
    except (InputError, ControlPlaneError) as exc:
        print(f"gpushare-dra simulate: error: {exc}", file=stderr)
        return EXIT_USAGE
    progress = Progress(stderr)
    started = time.monotonic()
    reports: list[ScenarioReport] = []
    controller = controller_settings(settings)
    try:
        stack = Stack(
            names,
            inventory,
            controller,
            binaries=binaries,
            on_progress=progress,
            consumable_capacity=settings.consumable_capacity,
        )
    except ControlPlaneError as exc:
        print(f"gpushare-dra simulate: error: {exc}", file=stderr)
        return EXIT_USAGE
    try:
        with _sigterm_interrupts(), stack:
            runner = Runner(stack, names, progress)
            for scenario, manifest in runs:
                if scenario is None:
                    reports.append(runner.apply(manifest))
                else:
                    reports.append(runner.run(scenario, manifest, scenario.name))
            progress("stopping")
    except KeyboardInterrupt:
        progress.close()
        print("gpushare-dra simulate: interrupted; everything it started is stopped", file=stderr)
        return EXIT_INTERRUPTED
    except (StackError, SimulationError, ApiError) as exc:
        progress.close()
        print(f"gpushare-dra simulate: error: the simulated cluster failed: {exc}", file=stderr)
        return EXIT_FAILED
    progress.close()
    seconds = time.monotonic() - started
    report = _render(
        names,
        settings,
        controller,
        description=description,
        plane=stack.describe(),
        reports=reports,
        seconds=seconds,
    )
    stdout.write(report)
    return EXIT_OK if all(r.passed for r in reports) else EXIT_FAILED


def _render(
    names: DriverNames,
    settings: SimulateSettings,
    controller: ControllerSettings,
    *,
    description: str,
    plane: str,
    reports: Sequence[ScenarioReport],
    seconds: float,
) -> str:
    policy = {
        "online": str(controller.gpu_placement_online),
        "offline": str(controller.gpu_placement_offline),
        "node": str(controller.node_placement),
    }
    if settings.output != "table":
        header = {
            "driver": names.driver,
            "inventory": description,
            "kubernetes": plane,
            "policy": policy,
        }
        return render_document(header, reports, seconds, settings.output) + "\n"
    intro = [
        "gpushare-dra simulate: the real controller, webhook and kubelet plugins on fake GPUs",
        f"cluster:   {description} (driver {names.driver})",
        f"k8s:       {plane}",
        f"placement: online {policy['online']}, offline {policy['offline']}, "
        f"nodes {policy['node']} (for shares whose config sets none)",
        "env:       what the interception layer reads (-o json: every CUDA_*, GPU_*, GPUSHARE_*)",
    ]
    return render_table(intro, reports, seconds, expectations=settings.apply is None)
