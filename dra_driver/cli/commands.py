"""What each subcommand runs, until (and as) the component behind it lands.

Each subcommand imports its component when it runs: one image serves every component, and
the kubelet plugin on every GPU node must not pay, in memory and start-up, for the
controller's engine, the webhook or the planner it never runs.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Final

from dra_driver import __version__
from dra_driver.cli.flags import settings_from_arguments
from dra_driver.controller.settings import ControllerSettings
from dra_driver.hamicore.region import RegionError
from dra_driver.hamicore.settings import RegionSettings
from dra_driver.k8s.errors import ApiError
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.kubeletplugin.settings import KubeletPluginSettings
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.ops.settings import CleanupSettings, StatusSettings
from dra_driver.plan.errors import PlanInputError
from dra_driver.plan.settings import PlanSettings
from dra_driver.settings import OutputSettings, as_document
from dra_driver.webhook.settings import WebhookSettings

if TYPE_CHECKING:
    from dra_driver.cli.command import Invocation
    from dra_driver.controller.view import ClusterView

EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_REFUSED: Final = 3
"""plan: a pod, template or claim of the workload would be refused (a CI gate can fail on it)."""

# Runtime libraries whose versions matter when reporting a bug.
_REPORTED_DISTRIBUTIONS: Final = (
    "kubernetes",
    "grpcio",
    "protobuf",
    "nvidia-ml-py",
    "structlog",
    "gpushare-dra-simulator",
)


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def version(invocation: Invocation) -> int:
    """Print the driver version, the API names it serves and its key library versions."""
    names = invocation.names
    facts = {
        "driver": names.driver,
        "configApiVersion": names.config_api_version,
        "cdiKind": names.cdi_kind,
        "python": platform.python_version(),
    }
    libraries = {name: _distribution_version(name) for name in _REPORTED_DISTRIBUTIONS}
    output = invocation.settings(OutputSettings).output
    if output != "table":
        report = {"version": __version__, **facts, "libraries": libraries}
        print(as_document(report, output))  # noqa: T201
        return 0
    print(f"gpushare-dra {__version__}")  # noqa: T201
    for key, value in (facts | libraries).items():
        print(f"  {key}: {value}")  # noqa: T201
    return 0


def kubelet_plugin(invocation: Invocation) -> int:
    """Run the kubelet plugin until SIGTERM."""
    from dra_driver.kubeletplugin import plugin  # noqa: PLC0415 - see the module docstring

    return plugin.run(
        invocation.names,
        invocation.settings(KubeletPluginSettings),
        invocation.settings(KubeClientSettings),
        invocation.settings(ObservabilitySettings),
    )


def controller(invocation: Invocation) -> int:
    """Run the allocation controller until SIGTERM (or until it loses its Lease).

    With ``--webhook-enabled`` the process serves the admission webhook too, started before
    the controller so that pods are gated from the moment this replica runs, and reading the
    controller's informers rather than watching the same objects a second time.
    """
    from dra_driver.controller import run as controller_run  # noqa: PLC0415 - see the module
    from dra_driver.webhook import run as webhook_run  # noqa: PLC0415 - docstring
    from dra_driver.webhook.cache import Borrowed  # noqa: PLC0415 - docstring

    kube = invocation.settings(KubeClientSettings)
    webhook_settings = invocation.settings(WebhookSettings)

    def host(view: ClusterView) -> webhook_run.Webhook:
        # The webhook reads the controller's caches of classes, claims, slices and quotas.
        borrowed = Borrowed(
            classes=view.classes, claims=view.claims, slices=view.slices, quotas=view.quotas
        )
        return webhook_run.serve(invocation.names, webhook_settings, kube, borrowed=borrowed)

    try:
        return controller_run.run(
            invocation.names,
            invocation.settings(ControllerSettings),
            kube,
            invocation.settings(ObservabilitySettings),
            host=host if webhook_settings.webhook_enabled else None,
            default_backend=webhook_settings.backend,
        )
    except webhook_run.WebhookConfigError as exc:
        print(f"gpushare-dra controller: error: webhook: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_USAGE


def webhook(invocation: Invocation) -> int:
    """Run the admission webhook until SIGTERM."""
    from dra_driver.webhook import run as webhook_run  # noqa: PLC0415 - see the module docstring

    return webhook_run.run(
        invocation.names,
        invocation.settings(WebhookSettings),
        invocation.settings(KubeClientSettings),
        invocation.settings(ObservabilitySettings),
    )


def region(invocation: Invocation) -> int:
    """Decode a HAMi-core region file; exit 2 when it is missing, unreadable or unknown."""
    from dra_driver.hamicore import report  # noqa: PLC0415 - see the module docstring

    settings = invocation.settings(RegionSettings)
    if settings.file is None:
        print("gpushare-dra region: error: give the region FILE to decode", file=sys.stderr)  # noqa: T201
        return EXIT_USAGE
    try:
        decoded = report.read_region_file(settings.file)
    except (RegionError, OSError) as exc:
        print(f"gpushare-dra region: error: {settings.file}: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_USAGE
    print(report.render(decoded, settings.output))  # noqa: T201
    return 0


def status(invocation: Invocation) -> int:
    """Print the live view of cards and waiting pods; exit 2 for no cluster, 1 if the API fails."""
    from dra_driver.ops import command as ops_command  # noqa: PLC0415 - see the module docstring

    return ops_command.status(invocation.names, invocation.settings(StatusSettings))


def cleanup(invocation: Invocation) -> int:
    """Remove this driver's finalizers and gates after an uninstall; exit 1 if it cannot."""
    from dra_driver.ops import command as ops_command  # noqa: PLC0415 - see the module docstring

    return ops_command.cleanup(invocation.names, invocation.settings(CleanupSettings))


def _terminal_progress() -> Callable[[str], None] | None:
    """On a terminal, one stderr line rewritten in place; elsewhere nothing (logs stay clean)."""
    if not sys.stderr.isatty():
        return None

    def show(text: str) -> None:
        sys.stderr.write(f"\r\033[K{text}")
        sys.stderr.flush()

    return show


def plan(invocation: Invocation) -> int:
    """Print where the workload would land; exit 3 if anything would be refused.

    Exit 2 for unusable input, 1 if the API server fails.
    """
    # Flags alone, without the environment: a flag beats a variable when choosing the cluster.
    from dra_driver.plan import command as plan_command  # noqa: PLC0415 - see the module docstring

    flags = settings_from_arguments(PlanSettings, invocation.namespace, {})
    try:
        progress = _terminal_progress()
        try:
            report, refused = plan_command.run(
                invocation.names, invocation.settings(PlanSettings), flags, progress
            )
        finally:
            if progress is not None:
                sys.stderr.write("\r\033[K")  # the report starts on a clean line
    except PlanInputError as exc:
        print(f"gpushare-dra plan: error: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_USAGE
    except ApiError as exc:
        print(f"gpushare-dra plan: error: the API server failed: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_FAILURE
    print(report)  # noqa: T201
    return EXIT_REFUSED if refused else 0
