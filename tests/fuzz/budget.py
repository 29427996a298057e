"""How long the fuzz targets run: bounded in the test suite, longer from hack/fuzz.py."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("GPUSHARE_FUZZ_EXAMPLES", "300"))
"""Examples per target; hack/fuzz.py raises it."""

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
