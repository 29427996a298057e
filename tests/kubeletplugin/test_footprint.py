"""The privileged plugin runs on every GPU node: it must not load what it never uses."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from kubernetes import client
from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames
from dra_driver.kubeletplugin import plugin
from dra_driver.kubeletplugin.publisher import SlicePublisher
SlicePublisher(client.ApiClient(), DriverNames.for_driver(DEFAULT_DRIVER_NAME), "node-a")
client.ResourceV1Api(client.ApiClient())
loaded = sorted(m for m in sys.modules if m in {
    "aiohttp", "kubernetes.aio", "kubernetes.client.api.core_v1_api",
})
print(",".join(loaded))
"""


def test_the_plugin_loads_neither_the_async_client_nor_the_core_api() -> None:
    """aiohttp, kubernetes.aio and CoreV1Api (230 model modules) stay out of the plugin."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""
