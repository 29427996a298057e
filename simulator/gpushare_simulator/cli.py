"""The ``simulate`` subcommand that this distribution adds to ``gpushare-dra``.

``gpushare-dra`` finds it through the entry point group ``gpushare_dra.commands``
(pyproject.toml); the driver imports nothing of the simulator.
"""

from __future__ import annotations

import sys

from dra_driver.cli.command import TOOL_ENV_PREFIX, Command, Invocation
from dra_driver.logging import configure_logging
from dra_driver.settings import CommonSettings
from gpushare_simulator.settings import SimulateSettings


def run(invocation: Invocation) -> int:
    """Run the scenarios (or ``--apply``) on a fake cluster; exit 1 if one fails, 2 bad input.

    The components log to stderr at ``error`` unless ``--log-level`` / ``LOG_LEVEL`` says
    otherwise: the progress lines and the report are what this command is for.
    """
    # The stack is heavy; --help and the other subcommands must not pay for it.
    from gpushare_simulator.simulate import command  # noqa: PLC0415

    common = invocation.settings(CommonSettings)
    given = isinstance(getattr(invocation.namespace, "log_level", None), str)
    if not given and not invocation.environ.get("LOG_LEVEL"):
        configure_logging(level="error", fmt=common.log_format)
    return command.run(
        invocation.names, invocation.settings(SimulateSettings), sys.stdout, sys.stderr
    )


SIMULATE = Command(
    "simulate",
    "run the driver on a fake cluster with fake GPUs: the acceptance scenarios, or your manifests",
    (SimulateSettings,),
    run,
    TOOL_ENV_PREFIX,
)
