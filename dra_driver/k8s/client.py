"""Construction of the Kubernetes API client from settings, with every request bounded in time.

The generated client waits forever unless each call passes ``_request_timeout``, and urllib3
retries a timed-out read up to three times, each on another pooled connection. After a
partition every pooled connection can be dead without being closed, so one stuck request
would become many. Here every request gets a ``(connect, read)`` timeout unless it brings its
own, a timed-out read is not retried by urllib3 (the caller decides, and a write's outcome
must be read back first), and a read timeout drops the idle pooled connections: whatever
killed one of them most likely killed the others too, and a fresh connection costs one
handshake where a dead one costs a whole timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import urllib3
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.config.config_exception import ConfigException

from dra_driver import __version__
from dra_driver.k8s.settings import ApiTimeouts, KubeClientSettings
from dra_driver.logging import get_logger

log = get_logger(__name__)

USER_AGENT_PREFIX: Final = "gpushare-dra-"
CREDENTIAL_RECHECK_SECONDS: Final = 1.0
"""How often a request may look whether the kubeconfig's credentials changed or expired."""


class ClientConfigError(RuntimeError):
    """No usable credentials: neither a readable kubeconfig nor an in-cluster service account."""


class _BoundedRestClient(rest.RESTClientObject):
    """The generated REST layer with a default timeout and pool clean-up after a timeout."""

    def __init__(self, configuration: client.Configuration, timeouts: ApiTimeouts) -> None:
        super().__init__(configuration)
        self._default_timeout = timeouts.per_request

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        body: object = None,
        post_params: object = None,
        _request_timeout: object = None,
    ) -> rest.RESTResponse:
        """Send one request, bounded by ``_request_timeout`` or the client's default."""
        try:
            response: rest.RESTResponse = super().request(  # type: ignore[no-untyped-call]
                method,
                url,
                headers=headers,
                body=body,
                post_params=post_params,
                _request_timeout=_request_timeout or self._default_timeout,
            )
        except urllib3.exceptions.ReadTimeoutError:
            self.forget_connections()
            raise
        return response

    def forget_connections(self) -> None:
        """Close every idle pooled connection; connections in use close when released."""
        log.info("api.connections_dropped", reason="a request to the API server timed out")
        self.pool_manager.clear()


class TimedApiClient(client.ApiClient):
    """An API client whose every request is bounded by :attr:`timeouts`.

    ``component`` names the client in its User-Agent, as Kubernetes components do, so the API
    server's audit log and an operator's ``kubectl get --raw /metrics`` can tell ours apart.
    """

    def __init__(
        self,
        configuration: client.Configuration,
        timeouts: ApiTimeouts,
        component: str | None = None,
    ) -> None:
        super().__init__(configuration)
        self.timeouts = timeouts
        self.rest_client = _BoundedRestClient(configuration, timeouts)
        if component:
            self.user_agent = f"{USER_AGENT_PREFIX}{component}/{__version__}"


def timeouts_of(api_client: object) -> ApiTimeouts:
    """Return the bounds an API client applies (the defaults for any other client)."""
    return api_client.timeouts if isinstance(api_client, TimedApiClient) else ApiTimeouts()


def forget_connections(api_client: object) -> None:
    """Drop a client's idle pooled connections, after a watch on one of them went silent."""
    rest_client = getattr(api_client, "rest_client", None)
    if isinstance(rest_client, _BoundedRestClient):
        rest_client.forget_connections()


def client_of(method: Any) -> object:  # noqa: ANN401 - a bound method of any generated API
    """Return the API client behind a generated API method (``None`` for anything else)."""
    return getattr(getattr(method, "__self__", None), "api_client", None)


def throttled_refresh(
    hook: Callable[[client.Configuration], None],
    every: float = CREDENTIAL_RECHECK_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[client.Configuration], None]:
    """Return ``hook``, run at most once per ``every`` seconds.

    A client loaded from a kubeconfig calls its loader's refresh hook before every request,
    and the hook applies the whole kubeconfig to the configuration again (its host setter
    scans the environment for proxies): 3 % of the controller's CPU on a real control plane.
    An expired token is still noticed within ``every`` seconds.
    """
    lock = threading.Lock()
    last = [-float("inf")]

    def refresh(configuration: client.Configuration) -> None:
        now = clock()
        with lock:
            due = now - last[0] >= every
            if due:
                last[0] = now
        if due:
            hook(configuration)

    return refresh


def bounded_retries(configuration: client.Configuration) -> None:
    """Let urllib3 retry a failed connect once, and never a read that timed out or broke.

    A read may fail after the API server acted on the request: only the caller knows whether
    sending it again is safe, and how to learn what happened.
    """
    configuration.retries = urllib3.Retry(total=1, connect=1, read=False, status=0, redirect=0)


def new_api_client(
    settings: KubeClientSettings,
    component: str,
    *,
    retries: bool = True,
    context: str | None = None,
) -> TimedApiClient:
    """Return an API client from ``--kubeconfig``, else from the Pod's service account.

    Each call builds its own configuration object, never the library-global default, so two
    clients in one process (the simulator runs several components) cannot affect each other.
    ``retries=False`` turns off urllib3's retries entirely: a caller with a deadline (the
    webhook answers within the API server's timeout) must see a failure once. ``context``
    picks a kubeconfig context other than its current one.
    """
    if context and not settings.kubeconfig:
        raise ClientConfigError(
            f"--context {context!r} needs a kubeconfig (--kubeconfig, KUBECONFIG or "
            "~/.kube/config); the in-cluster service account has no contexts"
        )
    configuration = client.Configuration()
    if retries:
        bounded_retries(configuration)
    else:
        configuration.retries = False
    # The kubernetes config loaders carry no type annotations, hence the ignores below.
    try:
        if settings.kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig,
                context=context,
                client_configuration=configuration,
            )
        else:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
    except (ConfigException, OSError) as exc:
        source = (
            f"kubeconfig {settings.kubeconfig!r}"
            if settings.kubeconfig
            else "in-cluster service account (no --kubeconfig, KUBECONFIG or ~/.kube/config)"
        )
        raise ClientConfigError(f"cannot load Kubernetes credentials from {source}: {exc}") from exc
    hook: Callable[[client.Configuration], None] | None = configuration.refresh_api_key_hook
    if hook is not None:
        # Upstream declares the attribute by its initial value, None.
        configuration.refresh_api_key_hook = throttled_refresh(hook)  # type: ignore[assignment]
    return TimedApiClient(configuration, settings.timeouts, component)


def tool_api_client(kubeconfig: str | None, context: str | None, command: str) -> TimedApiClient:
    """Return a client for a command run by a person, found as kubectl finds its cluster.

    ``--kubeconfig`` (or ``KUBECONFIG``), else ``~/.kube/config`` when it exists, else the
    Pod's service account (the chart's cleanup hook runs in a Pod).
    """
    default = Path.home() / ".kube" / "config"
    if not kubeconfig and default.is_file():
        kubeconfig = str(default)
    return new_api_client(KubeClientSettings(kubeconfig=kubeconfig), command, context=context)
