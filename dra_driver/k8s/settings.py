"""How a component reaches the Kubernetes API."""

from __future__ import annotations

import dataclasses

from dra_driver.settings import flag


@dataclasses.dataclass(frozen=True)
class KubeClientSettings:
    """Kubernetes API access."""

    kubeconfig: str | None = flag(
        None,
        "kubeconfig file (several joined by ':' are merged); in-cluster service account "
        "credentials when unset",
    )
