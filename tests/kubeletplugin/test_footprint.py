"""The privileged plugin runs on every GPU node: it must not load what it never uses."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import dra_driver.cli.main  # what `gpushare-dra kubelet-plugin` loads before it runs
from kubernetes import client
from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.kubeletplugin import plugin
from dra_driver.kubeletplugin.publisher import SlicePublisher
SlicePublisher(client.ApiClient(), DriverNames.for_driver(DEFAULT_DRIVER_NAME), "node-a")
client.ResourceV1Api(client.ApiClient())
loaded = sorted(m for m in sys.modules if m in {
    "aiohttp", "kubernetes.aio", "kubernetes.client.api.core_v1_api", "cel",
    "dra_driver.engine", "dra_driver.webhook.run", "dra_driver.plan.command",
})
print(",".join(loaded))
"""


def test_the_plugin_loads_only_what_it_runs() -> None:
    """No async client, CoreV1Api (230 model modules), CEL, or other components' code."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""
