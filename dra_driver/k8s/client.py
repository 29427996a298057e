"""Construction of the Kubernetes API client from settings."""

from __future__ import annotations

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from dra_driver.k8s.settings import KubeClientSettings


class ClientConfigError(RuntimeError):
    """No usable credentials: neither a readable kubeconfig nor an in-cluster service account."""


def new_api_client(settings: KubeClientSettings, *, retries: bool = True) -> client.ApiClient:
    """Return an API client from ``--kubeconfig``, else from the Pod's service account.

    Each call builds its own configuration object, never the library-global default, so two
    clients in one process (the simulator runs several components) cannot affect each other.
    ``retries=False`` turns off urllib3's own retries (three by default): a caller with a
    deadline (the webhook answers within the API server's timeout) must see a timeout once,
    not four times over.
    """
    configuration = client.Configuration()
    if not retries:
        configuration.retries = False
    # The kubernetes config loaders carry no type annotations, hence the ignores below.
    try:
        if settings.kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig, client_configuration=configuration
            )
        else:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
    except (ConfigException, OSError) as exc:
        source = (
            f"kubeconfig {settings.kubeconfig!r}"
            if settings.kubeconfig
            else "in-cluster service account (no --kubeconfig / KUBECONFIG given)"
        )
        raise ClientConfigError(f"cannot load Kubernetes credentials from {source}: {exc}") from exc
    return client.ApiClient(configuration)
