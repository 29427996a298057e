"""The ``gpushare-dra`` entry point: one binary, one subcommand per component."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, Final

from dra_driver import __version__
from dra_driver.api import DriverNames, InvalidDriverNameError
from dra_driver.cli import commands, completion
from dra_driver.cli.command import ENTRY_POINT_GROUP, TOOL_ENV_PREFIX, Command, Invocation
from dra_driver.cli.flags import SettingsError, add_settings_arguments, settings_from_arguments
from dra_driver.controller.settings import ControllerSettings
from dra_driver.hamicore.settings import RegionSettings
from dra_driver.k8s.settings import KubeClientSettings
from dra_driver.kubeletplugin.settings import KubeletPluginSettings
from dra_driver.logging import bind, configure_logging
from dra_driver.metrics.settings import ObservabilitySettings
from dra_driver.ops.settings import CleanupSettings, StatusSettings
from dra_driver.plan.settings import PlanSettings
from dra_driver.settings import CommonSettings, CompletionSettings, OutputSettings
from dra_driver.webhook.settings import WebhookSettings

PROG: Final = "gpushare-dra"
EXIT_USAGE: Final = commands.EXIT_USAGE
EXIT_BROKEN_PIPE: Final = 128 + 13
"""What a shell reports for a program killed by SIGPIPE."""


def _completion(invocation: Invocation) -> int:
    """Print the completion script of every command, this process's add-ons included."""
    shell = invocation.settings(CompletionSettings).shell
    print(completion.script(build_parser(), shell, (PROG, "kubectl-gpushare")), end="")  # noqa: T201
    return 0


COMMANDS: Final = (
    Command(
        "controller",
        "allocate ResourceClaims of the driver's DeviceClasses (Deployment, leader-elected)",
        (ControllerSettings, KubeClientSettings, ObservabilitySettings, WebhookSettings),
        commands.controller,
    ),
    Command(
        "kubelet-plugin",
        "publish this node's cards and prepare claims for the kubelet (DaemonSet)",
        (KubeletPluginSettings, KubeClientSettings, ObservabilitySettings),
        commands.kubelet_plugin,
    ),
    Command(
        "webhook",
        "validate GPU share requests and gate pods for the controller (admission webhook)",
        (WebhookSettings, KubeClientSettings, ObservabilitySettings),
        commands.webhook,
    ),
    Command(
        "plan",
        "show where workloads would land on an inventory or a live cluster (capacity planning)",
        (PlanSettings,),
        commands.plan,
        TOOL_ENV_PREFIX,
    ),
    Command(
        "status",
        "show the cluster's cards: shares, cores and memory used and free, the pods on each, the "
        "room held for online pods that preempt, and the pods waiting with the reason (read-only)",
        (StatusSettings,),
        commands.status,
        TOOL_ENV_PREFIX,
    ),
    Command(
        "cleanup",
        "after an uninstall: remove this driver's finalizers from claims and gates from pods",
        (CleanupSettings,),
        commands.cleanup,
        TOOL_ENV_PREFIX,
    ),
    Command(
        "region",
        "decode a HAMi-core shared region file: limits, processes, memory and SM use, priority",
        (RegionSettings,),
        commands.region,
        TOOL_ENV_PREFIX,
    ),
    Command(
        "version", "print version information", (OutputSettings,), commands.version, TOOL_ENV_PREFIX
    ),
    Command(
        "completion",
        "print a shell completion script: source <(gpushare-dra completion bash), or zsh",
        (CompletionSettings,),
        _completion,
        TOOL_ENV_PREFIX,
    ),
)


# Subcommands that other distributions add, with what to install for each: asked for without
# it, the command says so instead of argparse's "invalid choice".
EXTENSIONS: Final = {
    "simulate": (
        "the simulator, which this install does not have (components and the image ship "
        "without it). From a clone of the repository: pip install . ./simulator"
    ),
}


def available_commands() -> tuple[Command, ...]:
    """Return the built-in commands and those installed distributions add.

    A distribution adds one with an entry point in ``gpushare_dra.commands`` whose name is the
    subcommand's and whose object is a :class:`Command`. One that cannot be loaded is left out
    with a warning: a broken add-on must not stop the driver's own commands.
    """
    found = list(COMMANDS)
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            command = entry.load()
        except Exception as exc:  # noqa: BLE001 - any failure of foreign code means "not offered"
            problem = f"{type(exc).__name__}: {exc}"
        else:
            taken = any(c.name == entry.name for c in found)
            if isinstance(command, Command) and command.name == entry.name and not taken:
                found.append(command)
                continue
            problem = "not a Command of that name, or a name already taken"
        print(  # noqa: T201
            f"{PROG}: warning: command {entry.name!r} of {entry.value} is left out: {problem}",
            file=sys.stderr,
        )
    return tuple(found)


def build_parser(
    available: Sequence[Command] | None = None, prog: str = PROG
) -> argparse.ArgumentParser:
    """Build the full parser; every flag also reads its UPPER_SNAKE_CASE env variable."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Kubernetes DRA driver that shares NVIDIA GPUs by cores and memory.",
        epilog="Every flag can also be set by an environment variable of the same name in "
        "upper snake case: e.g. --node-name / NODE_NAME for the components (controller, "
        "kubelet-plugin, webhook), --output / GPUSHARE_OUTPUT for the tools. A flag wins over "
        "the variable.",
    )
    parser.add_argument("--version", action="version", version=f"{prog} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in available_commands() if available is None else available:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        classes: tuple[type[Any], ...] = (CommonSettings, *command.settings)
        for settings_class in classes:
            add_settings_arguments(sub, settings_class, env_prefix=command.env_prefix)
    return parser


def main(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    prog: str = PROG,
) -> int:
    """Run ``gpushare-dra`` (or ``prog``, as it is called); returns the process exit status."""
    environ = os.environ if environ is None else environ
    available = available_commands()
    args = list(sys.argv[1:] if argv is None else argv)
    missing = EXTENSIONS.get(args[0]) if args else None
    if missing is not None and all(c.name != args[0] for c in available):
        print(f"{prog} {args[0]}: error: `{args[0]}` needs {missing}", file=sys.stderr)  # noqa: T201
        return commands.EXIT_FAILURE
    mistyped = _mistyped(args, available, prog)
    if mistyped is not None:
        print(mistyped, file=sys.stderr)  # noqa: T201
        return EXIT_USAGE
    parser = build_parser(available, prog)
    namespace, extra = parser.parse_known_args(args)
    command = next(c for c in available if c.name == namespace.command)
    if extra:
        problem = _unknown(extra, parser, command.name, prog)
        print(f"{prog} {command.name}: error: {problem}", file=sys.stderr)  # noqa: T201
        return EXIT_USAGE
    try:
        common = settings_from_arguments(
            CommonSettings, namespace, environ, env_prefix=command.env_prefix
        )
        names = DriverNames.for_driver(common.driver_name)
        invocation = Invocation(command.name, namespace, environ, names, command.env_prefix)
        for settings_class in command.settings:
            # Resolve everything up front: a bad setting fails before anything starts.
            invocation.settings(settings_class)
    except (SettingsError, InvalidDriverNameError) as exc:
        print(f"{prog} {command.name}: error: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_USAGE
    configure_logging(level=common.log_level, fmt=common.log_format)
    bind(component=command.name, driver=names.driver)
    try:
        status = command.run(invocation)
        sys.stdout.flush()  # a reader gone away shows here, not in a traceback at exit
    except BrokenPipeError:
        # `gpushare-dra plan ... | head`: stop quietly, as a tool killed by SIGPIPE does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return status


def _mistyped(args: Sequence[str], available: Sequence[Command], prog: str) -> str | None:
    """Return the error for a command name that is none of ours, with the closest one."""
    if not args or args[0].startswith("-"):
        return None
    names = [c.name for c in available]
    if args[0] in names:
        return None
    close = difflib.get_close_matches(args[0], names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; the commands: {', '.join(names)}"
    return f"{prog}: error: unknown command {args[0]!r}{hint} (see {prog} --help)"


def _unknown(extra: Sequence[str], parser: argparse.ArgumentParser, command: str, prog: str) -> str:
    """Name what the command does not take, suggesting the flag most like each mistyped one."""
    # argparse has no public way to list a subcommand's options.
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = [o for a in subparsers.choices[command]._actions for o in a.option_strings]
    problems = []
    for token in extra:
        close = difflib.get_close_matches(token.split("=", 1)[0], options, n=1)
        hint = f" (did you mean {close[0]}?)" if token.startswith("-") and close else ""
        problems.append(f"unrecognized argument {token}{hint}")
    return "; ".join(problems) + f"; see {prog} {command} --help"


def kubectl_plugin(argv: Sequence[str] | None = None) -> int:
    """Run as ``kubectl gpushare [COMMAND ...]``: the same commands, ``status`` by default."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help", "--version")):
        args = ["status", *args]
    return main(args, prog="kubectl gpushare")
