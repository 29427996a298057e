"""How a component reaches the Kubernetes API, and how long it waits for it."""

from __future__ import annotations

import dataclasses
from typing import Final

from dra_driver.settings import InvalidSettingError, flag, kubeconfig_flag

WATCH_GRACE_SECONDS: Final = 5.0
"""How much longer than ``timeoutSeconds`` a watch may stay silent before the client gives up.

A healthy API server ends a watch at ``timeoutSeconds``, so a silence longer than that (plus
this margin for a busy server, at most the watch's own length) means the connection is dead.
Giving up on a live but late watch costs one re-watch from the last resourceVersion.
"""


@dataclasses.dataclass(frozen=True)
class ApiTimeouts:
    """Client-side bounds on every request to the API server, in seconds.

    A connection can die without being closed (a partition, a load balancer that lost its
    state): without a bound, a request on it waits forever, and so does whoever made it.
    """

    connect: float = 10.0
    request: float = 30.0
    watch: int = 30

    def __post_init__(self) -> None:
        for name in ("connect", "request", "watch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} timeout must be a positive number of seconds: {value!r}")

    @property
    def per_request(self) -> tuple[float, float]:
        """``(connect, read)`` for an ordinary request."""
        return self.connect, self.request

    @property
    def watch_read(self) -> float:
        """How long a watch may stay silent before the client counts its connection dead."""
        return self.watch + min(WATCH_GRACE_SECONDS, self.watch)

    @property
    def per_watch(self) -> tuple[float, float]:
        """``(connect, read)`` for a watch."""
        return self.connect, self.watch_read

    def calls(self, count: int) -> float:
        """Return how long ``count`` requests in a row take when each runs into its timeout.

        What a watchdog allows a loop between two signs of progress: longer than that, the
        loop waits on something no timeout bounds.
        """
        return count * (self.connect + self.request)

    @property
    def watch_stall_limit(self) -> float:
        """The longest an informer may go without news: two of its slowest steps.

        A step is a connect plus the longest read it waits for, a silent watch or a list.
        """
        return 2 * (self.connect + max(self.watch_read, self.request))


_DEFAULTS: Final = ApiTimeouts()


@dataclasses.dataclass(frozen=True)
class KubeClientSettings:
    """Kubernetes API access."""

    kubeconfig: str | None = kubeconfig_flag(
        "kubeconfig file (several joined by ':' are merged); in-cluster service account "
        "credentials when unset"
    )
    api_connect_timeout: float = flag(
        _DEFAULTS.connect, "seconds to wait for a connection to the API server"
    )
    api_timeout: float = flag(
        _DEFAULTS.request,
        "seconds to wait for the API server's answer to a request (between any two reads); "
        "then the connection is dropped and the request fails, and a write whose outcome is "
        "unknown is read back",
    )
    watch_timeout: int = flag(
        _DEFAULTS.watch,
        "seconds the API server keeps each watch open (timeoutSeconds) before it is renewed; "
        f"a watch silent for this long plus {WATCH_GRACE_SECONDS:g} s is counted dead and "
        "renewed on a new connection",
    )

    def __post_init__(self) -> None:
        for name in ("api_connect_timeout", "api_timeout", "watch_timeout"):
            value = getattr(self, name)
            if not value > 0:
                raise InvalidSettingError(name, f"must be a positive number of seconds: {value}")

    @property
    def timeouts(self) -> ApiTimeouts:
        """The client-side bounds these settings give."""
        return ApiTimeouts(
            connect=self.api_connect_timeout, request=self.api_timeout, watch=self.watch_timeout
        )
