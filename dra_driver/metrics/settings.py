"""Where a component serves its metrics and probes."""

from __future__ import annotations

import dataclasses

from dra_driver.settings import flag


@dataclasses.dataclass(frozen=True)
class ObservabilitySettings:
    """Metrics and probes."""

    metrics_port: int = flag(
        8080, "TCP port of /metrics, /livez and /readyz; 0 picks a free port, negative: off"
    )
